package extensions

import (
	"crypto/hmac"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Verifier checks the signatures of calls, for extensions written in Go:
// a call is accepted once, within Window of the time it was signed.
type Verifier struct {
	Secret []byte
	// Window is how far a call's time may be from now (0: 5 minutes).
	Window time.Duration

	mu   sync.Mutex
	seen map[string]time.Time // signatures accepted, until they expire
}

// Errors of Verify.
var (
	ErrNoSignature  = errors.New("no or malformed " + SignatureHeader + " header")
	ErrBadSignature = errors.New("signature does not match the body")
	ErrStale        = errors.New("signed outside the replay window")
	ErrReplayed     = errors.New("this signed call was already accepted (a replay)")
)

// Verify checks the signature header of body received at now.
func (v *Verifier) Verify(header string, body []byte, now time.Time) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = val
		case "v1":
			sig = val
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return ErrNoSignature
	}
	if !hmac.Equal([]byte(sig), []byte(mac(v.Secret, ts, body))) {
		return ErrBadSignature
	}
	window := v.Window
	if window <= 0 {
		window = 5 * time.Minute
	}
	at := time.Unix(unix, 0)
	if at.Before(now.Add(-window)) || at.After(now.Add(window)) {
		return ErrStale
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seen == nil {
		v.seen = map[string]time.Time{}
	}
	for s, until := range v.seen {
		if now.After(until) {
			delete(v.seen, s)
		}
	}
	if _, ok := v.seen[sig]; ok {
		return ErrReplayed
	}
	v.seen[sig] = at.Add(window)
	return nil
}
