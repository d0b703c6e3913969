package users

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/api"
	"corpus/coordinator/auth"
	"corpus/coordinator/ldapauth"
	"corpus/coordinator/state"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// maxPasswordBytes bounds a password.
const maxPasswordBytes = 1024

// Failed logins allowed per window before further attempts are refused
// without asking the directory: per user, and per client address.
const (
	loginWindow      = time.Minute
	maxUserFailures  = 5
	maxAddrFailures  = 20
	maxLimiterKeys   = 10000
	loginLimitedHint = "too many failed logins"
)

var errBadLogin = errors.New("login refused: wrong user name or password (or the user does not log in with ldap: corpus user add NAME --auth ldap)")

func (s *userService) Login(ctx context.Context, req *connect.Request[corpusv1.LoginRequest]) (*connect.Response[corpusv1.LoginResponse], error) {
	m := req.Msg
	if err := names.Validate("user", m.User); err != nil {
		return nil, api.ToConnect(err)
	}
	if s.b.Passwords == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			errors.New("password login is off on this coordinator: start the coordinators with --ldap-url and --ldap-user-dn (or --ldap-base-dn), or log in with an API token (corpus login --token)"))
	}
	if len(m.Password) > maxPasswordBytes {
		return nil, api.ToConnect(api.Invalidf("password of %d bytes; the limit is %d", len(m.Password), maxPasswordBytes))
	}
	maxTTL := s.b.LoginTTL
	if maxTTL <= 0 {
		maxTTL = api.DefaultLoginTokenTTL
	}
	ttl := time.Duration(m.TtlSeconds) * time.Second
	switch {
	case m.TtlSeconds == 0:
		ttl = maxTTL
	case m.TtlSeconds < 0 || ttl > maxTTL:
		return nil, api.ToConnect(api.Invalidf("ttl %ds: want 1s to %s (login tokens always expire)", m.TtlSeconds, maxTTL))
	}
	addr := remoteHost(req.Peer().Addr)
	// The attempt counts as a failure from the start, so parallel
	// attempts cannot all slip under the limit; it is given back when it
	// turns out not to be the caller's failure.
	user, from := limit{"user:" + m.User, maxUserFailures}, limit{"addr:" + addr, maxAddrFailures}
	now := time.Now()
	if wait := s.limiter.take(now, user, from); wait > 0 {
		return nil, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("%s for %s or from %s: try again in %s", loginLimitedHint, m.User, addr, wait.Round(time.Second)))
	}
	refuse := func(reason string) {
		s.recordLogin(ctx, &corpusv1.UserLogin{User: m.User, Method: corpusv1.AuthLDAP, Remote: addr, Refused: reason + ", from " + addr})
	}
	u := s.b.Store.Read().User(m.User)
	switch {
	case u == nil:
		refuse("no such user")
		return nil, connect.NewError(connect.CodeUnauthenticated, errBadLogin)
	case u.Auth != corpusv1.AuthLDAP:
		refuse("the user does not log in with ldap")
		return nil, connect.NewError(connect.CodeUnauthenticated, errBadLogin)
	}
	if err := s.b.Passwords.Authenticate(ctx, m.User, m.Password); err != nil {
		if errors.Is(err, ldapauth.ErrBadCredentials) {
			refuse("wrong password or no directory entry")
			return nil, connect.NewError(connect.CodeUnauthenticated, errBadLogin)
		}
		// Not the user's fault: only the client address keeps it.
		s.limiter.giveBack(user.key, now)
		refuse("directory unavailable")
		s.b.Logger.Warn("ldap login", "user", m.User, "error", err)
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the LDAP directory could not be asked (%v); try again later or ask an operator", err))
	}
	s.limiter.reset(user.key)
	s.limiter.giveBack(from.key, now)
	t, plain := newUserToken(m.User, "ldap login from "+addr)
	t.ExpiresAt, t.Login = timestamppb.New(s.b.Now().Add(ttl)), true
	cmd := &corpusv1.Command{Actor: "user:" + m.User, Cmd: &corpusv1.Command_UserLogin{UserLogin: &corpusv1.UserLogin{
		User: m.User, Method: corpusv1.AuthLDAP, Remote: addr, Token: t}}}
	if _, err := s.b.Propose(ctx, cmd); err != nil {
		return nil, api.ToConnect(err)
	}
	return connect.NewResponse(&corpusv1.LoginResponse{Token: plain, Info: s.tokenInfo(t.Id)}), nil
}

// recordLogin writes a refused login to the audit log. The command is
// ignorable: it changes nothing else, so an older replica may skip it.
func (s *userService) recordLogin(ctx context.Context, l *corpusv1.UserLogin) {
	// A client that hangs up does not keep its failure out of the log.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	cmd := &corpusv1.Command{Ignorable: true, Actor: string(auth.Anonymous), Cmd: &corpusv1.Command_UserLogin{UserLogin: l}}
	if _, err := s.b.Propose(ctx, cmd); err != nil && !errors.Is(err, state.ErrLoginRefused) {
		s.b.Logger.Warn("recording a refused login", "user", l.User, "error", err)
	}
}

func remoteHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// loginLimiter counts failed logins per key (a user, a client address)
// over a sliding window. It lives on one replica: each replica a client
// tries counts on its own.
type loginLimiter struct {
	mu       sync.Mutex
	failures map[string][]time.Time
}

func newLoginLimiter() *loginLimiter {
	return &loginLimiter{failures: map[string][]time.Time{}}
}

// recent drops the failures of key older than the window; call with mu.
func (l *loginLimiter) recent(key string, now time.Time) []time.Time {
	f := l.failures[key]
	i := 0
	for i < len(f) && now.Sub(f[i]) >= loginWindow {
		i++
	}
	f = f[i:]
	if len(f) == 0 {
		delete(l.failures, key)
		return nil
	}
	l.failures[key] = f
	return f
}

// limit is a key and the failures it may have in the window.
type limit struct {
	key string
	max int
}

// take counts an attempt of every key at now, unless one of them has had
// its most in the window: then nothing is counted and take returns how
// long until the oldest of those leaves the window.
func (l *loginLimiter) take(now time.Time, limits ...limit) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var wait time.Duration
	for _, lim := range limits {
		if f := l.recent(lim.key, now); len(f) >= lim.max {
			wait = max(wait, f[len(f)-lim.max].Add(loginWindow).Sub(now))
		}
	}
	if wait > 0 {
		return wait
	}
	for _, lim := range limits {
		l.add(lim.key, now)
	}
	return 0
}

// add counts an attempt of key at now; call with mu.
func (l *loginLimiter) add(key string, now time.Time) {
	if len(l.failures) >= maxLimiterKeys {
		for k := range l.failures {
			l.recent(k, now)
		}
	}
	if len(l.failures) >= maxLimiterKeys {
		// Still full of live keys: an address flood. Count this one
		// anyway in place of an arbitrary other.
		for k := range l.failures {
			delete(l.failures, k)
			break
		}
	}
	f := append(l.failures[key], now)
	if len(f) > maxAddrFailures {
		f = f[len(f)-maxAddrFailures:]
	}
	l.failures[key] = f
}

// giveBack uncounts the attempt of key taken at at.
func (l *loginLimiter) giveBack(key string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.failures[key]
	for i := len(f) - 1; i >= 0; i-- {
		if f[i].Equal(at) {
			f = append(f[:i:i], f[i+1:]...)
			break
		}
	}
	if len(f) == 0 {
		delete(l.failures, key)
		return
	}
	l.failures[key] = f
}

func (l *loginLimiter) reset(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.failures, key)
}
