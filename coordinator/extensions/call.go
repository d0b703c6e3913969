package extensions

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/internal/clock"
	"corpus/internal/metrics"
	corpusv1 "corpus/proto/corpus/v1"
)

// SignatureHeader carries a signed call's signature:
// "t=UNIX,v1=HEX" with HEX the HMAC-SHA256, keyed by the shared secret,
// of "UNIX." followed by the body.
const SignatureHeader = "Corpus-Signature"

// Limits of an answer, and of the circuit breaker.
const (
	MaxAnswerBytes = 1 << 20
	// breakAfter failures in a row open an extension's breaker for
	// breakFor: calls then fail at once, without reaching it.
	breakAfter = 5
	breakFor   = 30 * time.Second
)

// Request is the payload of a call.
type Request struct {
	APIVersion string `json:"apiVersion"`
	// UID is new for every call (Call sets it), as Kubernetes'
	// AdmissionReview request.uid: two calls of the same request (a
	// write asked again after an election) are told apart by it, and
	// their signatures differ, so an extension that refuses replays
	// accepts both.
	UID    string          `json:"uid"`
	Kind   string          `json:"kind"`
	User   string          `json:"user"`
	Object json.RawMessage `json:"object"`
	// Image is the OCI image the write would run (a
	// corpusv1.AdmissionImage as JSON), absent when it runs none.
	Image json.RawMessage `json:"image,omitempty"`
}

// Answer is what an extension answers.
type Answer struct {
	Allowed *bool           `json:"allowed"`
	Message string          `json:"message"`
	Object  json.RawMessage `json:"object"`
	Lines   []string        `json:"lines"`
}

// CallError is a call that failed: the extension could not be reached,
// did not answer in time or well, or its breaker is open.
type CallError struct {
	Extension string
	Reason    string // metrics' result label: error, timeout, bad_answer, open
	Err       error
}

func (e *CallError) Error() string {
	return fmt.Sprintf("extension %s: %v", e.Extension, e.Err)
}

func (e *CallError) Unwrap() error { return e.Err }

// Caller calls extensions. It is safe for concurrent use.
type Caller struct {
	// Certificate returns the certificate presented for mutual TLS (nil:
	// none).
	Certificate func() *tls.Certificate
	// Now is the clock signatures are dated by (nil: clock.System).
	Now func() time.Time

	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec

	mu       sync.Mutex
	clients  map[string]cachedClient // by extension name
	breakers map[string]*breaker
}

type cachedClient struct {
	ca     string
	client *http.Client
}

// NewCaller returns a caller whose calls are counted in reg (nil: not
// counted).
func NewCaller(reg prometheus.Registerer, cert func() *tls.Certificate) *Caller {
	c := &Caller{
		Certificate: cert,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "extension", Name: "calls_total",
			Help: "Calls of admission extensions by extension and result: allowed, refused, error (unreachable or an error status), timeout, bad_answer (garbage or too big), open (its circuit breaker was open).",
		}, []string{"extension", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: "extension", Name: "call_duration_seconds",
			Help:    "Time of a call of an admission extension, by extension.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 10),
		}, []string{"extension"}),
		clients:  map[string]cachedClient{},
		breakers: map[string]*breaker{},
	}
	if reg != nil {
		reg.MustRegister(c.calls, c.duration)
	}
	return c
}

// Call calls extension e with req, signed with secret when it is not
// empty, and returns its answer. Any failure is a *CallError.
func (c *Caller) Call(ctx context.Context, e *corpusv1.Extension, secret []byte, req Request) (*Answer, error) {
	start := time.Now()
	ans, err := c.call(ctx, e, secret, req)
	result := "allowed"
	var ce *CallError
	switch {
	case errors.As(err, &ce):
		result = ce.Reason
	case ans.Allowed != nil && !*ans.Allowed:
		result = "refused"
	}
	c.calls.WithLabelValues(e.Name, result).Inc()
	if result != "open" {
		c.duration.WithLabelValues(e.Name).Observe(time.Since(start).Seconds())
	}
	return ans, err
}

func (c *Caller) call(ctx context.Context, e *corpusv1.Extension, secret []byte, req Request) (*Answer, error) {
	fail := func(reason string, err error) (*Answer, error) {
		if reason != "open" {
			c.breaker(e.Name).failed(time.Now())
		}
		return nil, &CallError{Extension: e.Name, Reason: reason, Err: err}
	}
	if until, open := c.breaker(e.Name).open(time.Now()); open {
		return fail("open", fmt.Errorf("not called: it failed %d times in a row, so calls are off until %s", breakAfter, until.Format(time.TimeOnly)))
	}
	client, err := c.client(e)
	if err != nil {
		return fail("error", err)
	}
	req.APIVersion = APIVersion
	req.UID = rand.Text()
	body, err := json.Marshal(req)
	if err != nil {
		return fail("error", err)
	}
	timeout := time.Duration(e.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = corpusv1.DefaultExtensionTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, e.Url, bytes.NewReader(body))
	if err != nil {
		return fail("error", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	if len(secret) > 0 {
		hr.Header.Set(SignatureHeader, Sign(secret, c.now(), body))
	}
	res, err := client.Do(hr)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return fail("timeout", fmt.Errorf("no answer within %s", timeout))
		}
		return fail("error", err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, MaxAnswerBytes+1))
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return fail("timeout", fmt.Errorf("no whole answer within %s", timeout))
	case err != nil:
		return fail("error", fmt.Errorf("reading its answer: %w", err))
	case res.StatusCode != http.StatusOK:
		return fail("error", fmt.Errorf("answered %s: %s", res.Status, snippet(raw)))
	case len(raw) > MaxAnswerBytes:
		return fail("bad_answer", fmt.Errorf("answer over %d bytes", MaxAnswerBytes))
	}
	var ans Answer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return fail("bad_answer", fmt.Errorf("answer is not the JSON of an admission answer (%v): %s", err, snippet(raw)))
	}
	if ans.Allowed == nil {
		return fail("bad_answer", fmt.Errorf("answer says neither allowed true nor false: %s", snippet(raw)))
	}
	c.breaker(e.Name).succeeded()
	return &ans, nil
}

func (c *Caller) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return clock.System.Now()
}

// client returns the HTTP client for an extension, made anew when its
// CA changes.
func (c *Caller) client(e *corpusv1.Extension) (*http.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.clients[e.Name]; ok && cc.ca == e.CaPem {
		return cc.client, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if e.CaPem != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(e.CaPem)) {
			return nil, errors.New("its CA holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	if c.Certificate != nil {
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if crt := c.Certificate(); crt != nil {
				return crt, nil
			}
			return &tls.Certificate{}, nil
		}
	}
	client := &http.Client{
		Transport: &http.Transport{
			Proxy: nil, TLSClientConfig: tc, MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second,
			TLSHandshakeTimeout: 5 * time.Second, ForceAttemptHTTP2: true,
		},
		// An extension answers; it does not send the coordinator
		// elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	c.clients[e.Name] = cachedClient{ca: e.CaPem, client: client}
	return client, nil
}

func snippet(b []byte) string {
	const max = 200
	if len(b) > max {
		return strconv.Quote(string(b[:max])) + "..."
	}
	return strconv.Quote(string(b))
}

// Sign returns the signature header of body sent at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

func mac(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts + "."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// breaker opens after breakAfter failures in a row, for breakFor; the
// first call after that is let through, and closes it if it succeeds.
type breaker struct {
	mu       sync.Mutex
	failures int
	until    time.Time
}

func (c *Caller) breaker(name string) *breaker {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.breakers[name]
	if b == nil {
		b = &breaker{}
		c.breakers[name] = b
	}
	return b
}

func (b *breaker) open(now time.Time) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Before(b.until) {
		return b.until, true
	}
	return time.Time{}, false
}

func (b *breaker) failed(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	if b.failures >= breakAfter {
		b.until = now.Add(breakFor)
		b.failures = breakAfter - 1 // half-open: one more failure opens it again
	}
}

func (b *breaker) succeeded() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures, b.until = 0, time.Time{}
}
