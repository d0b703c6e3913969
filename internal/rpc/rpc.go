// Package rpc holds what every corpus API client and server shares: the
// HTTP client and server settings, the bearer-token interceptor, and a
// writer onto a stream's messages.
package rpc

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/netutil"

	corpusv1 "corpus/proto/corpus/v1"
)

// HTTPClient returns a client for corpus APIs over TLS configured by tc
// (see package pki), speaking HTTP/2 or HTTP/1.1. With a nil tc it speaks
// cleartext (HTTP/1.1 and HTTP/2), for endpoints outside the cluster's
// TLS such as tests' plain servers.
func HTTPClient(tc *tls.Config) *http.Client {
	t := &http.Transport{
		Proxy:               nil, // cluster traffic never goes through a proxy from the environment
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tc,
		Protocols:           new(http.Protocols),
	}
	t.Protocols.SetHTTP1(true)
	if tc != nil {
		t.Protocols.SetHTTP2(true)
	} else {
		t.Protocols.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: t}
}

// BaseURL is the URL of a corpus API at host:port; an address that already
// names a scheme is kept.
func BaseURL(addr string) string {
	if strings.HasPrefix(addr, "https://") || strings.HasPrefix(addr, "http://") {
		return addr
	}
	return "https://" + addr
}

// SpecificHost is the host of a host:port address when another machine
// can dial it: not empty and not an unspecified IP (0.0.0.0, ::), which a
// listener on every address shows but which names, to whoever dials it,
// its own host.
func SpecificHost(addr string) (string, bool) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return "", false
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		return "", false
	}
	return host, true
}

// NewServer returns an HTTP server for a corpus API with timeouts that keep
// slow or idle clients from holding connections forever. Streams (watch,
// exec) are long-lived, so there is no write timeout. With tc it serves
// TLS (Serve wraps the listener); without, cleartext.
func NewServer(h http.Handler, tc *tls.Config) *http.Server {
	s := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		Protocols:         new(http.Protocols),
		TLSConfig:         tc,
		// A TLS handshake that goes wrong is the peer's problem; do not
		// fill the log with every scanner's attempt. Other errors stay.
		ErrorLog: log.New(handshakeFilter{os.Stderr}, "http: ", log.LstdFlags),
	}
	s.Protocols.SetHTTP1(true)
	if tc != nil {
		s.Protocols.SetHTTP2(true)
	} else {
		s.Protocols.SetUnencryptedHTTP2(true)
	}
	return s
}

// ErrorLog is an http.Server error log writing through logger (warn
// level, one event a line, in the daemon's log format), without TLS
// handshake errors, as NewServer's own.
func ErrorLog(logger *slog.Logger) *log.Logger {
	return log.New(handshakeFilter{slogWriter{logger}}, "", 0)
}

// slogWriter logs every write as one event.
type slogWriter struct{ logger *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.logger.Warn(strings.TrimSpace(string(p)))
	return len(p), nil
}

// StreamWriter adapts a streaming call's send function to io.Writer,
// one message a Write; it copies p, since the message outlives the call.
type StreamWriter func([]byte) error

func (w StreamWriter) Write(p []byte) (int, error) {
	if err := w(append([]byte(nil), p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

type handshakeFilter struct{ w io.Writer }

func (f handshakeFilter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("TLS handshake error")) {
		return len(p), nil
	}
	return f.w.Write(p)
}

// Serve serves s on ln, over TLS when s has a TLS configuration.
func Serve(s *http.Server, ln net.Listener) error {
	if s.TLSConfig != nil {
		return s.ServeTLS(ln, "", "")
	}
	return s.Serve(ln)
}

// Unreachable says whether err is a call's failure to reach its server
// at all (the connection refused, no route, the dial timed out), and
// gives the short cause ("connection refused"). An error the server
// sent is never one, even when it tells of a connection of its own that
// failed: that server answered.
func Unreachable(err error) (cause string, ok bool) {
	var op *net.OpError
	if err == nil || connect.IsWireError(err) || !errors.As(err, &op) || op.Op != "dial" || op.Err == nil {
		return "", false
	}
	var errno syscall.Errno
	if errors.As(op.Err, &errno) {
		return errno.Error(), true
	}
	return op.Err.Error(), true
}

// MaxConns bounds the connections an API listener holds at once; more
// wait in the kernel's backlog. With ReadHeaderTimeout it keeps a flood
// of idle or slow connections from exhausting the server.
const MaxConns = 4096

// Listen opens an API listener bounded to MaxConns connections.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(ln, MaxConns), nil
}

// CoordinatorCredentialPrefix starts the bearer token replicas present to
// each other: the prefix and the cluster's coordinator key.
const CoordinatorCredentialPrefix = "coord."

// Bearer returns a client interceptor that sends token as the credential.
func Bearer(token string) connect.Interceptor { return bearer(token) }

// ConsistencyHeader asks a coordinator for a linearizable read (value
// "linearizable"): see the API's consistentReads.
const ConsistencyHeader = "Corpus-Consistency"

// Linearizable asks for linearizable reads: it sets ConsistencyHeader on
// every unary call without side effects (writes are linearizable anyway).
func Linearizable() connect.Interceptor { return linearizable{} }

type linearizable struct{}

func (linearizable) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient && req.Spec().IdempotencyLevel == connect.IdempotencyNoSideEffects {
			req.Header().Set(ConsistencyHeader, "linearizable")
		}
		return next(ctx, req)
	}
}

func (linearizable) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (linearizable) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient && b != "" {
			req.Header().Set("Authorization", "Bearer "+string(b))
		}
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if b != "" {
			conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		}
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// The phrases of the coordinator's two retryable Unavailable answers.
// A coordinator marks those answers with a corpusv1.Retry detail
// (Unavailable); the phrases stay in their messages because a client
// must still understand a coordinator older than those details, which
// says why in words only (see retryOf).
const (
	NotLeaderPhrase = "not the raft leader"
	BusyPhrase      = "coordinators are busy"
	// MaybeDonePhrase is in those answers whose write may have taken
	// effect all the same: logged before its leader was deposed, or done
	// and not yet applied by the replica that answered.
	MaybeDonePhrase = "the write may have taken effect"
)

// ErrMaybeDone is what a coordinator wraps in an error whose write may
// have taken effect all the same; Unavailable says so in the answer's
// Retry detail.
var ErrMaybeDone = errors.New(MaybeDonePhrase)

// ErrStopping is the cause with which a stopping server ends the
// calls it still runs (context.Cause of their contexts): they answer
// Unavailable (RetryStopping), so that clients send them again to
// another replica instead of giving up on a cancelled call.
var ErrStopping = errors.New("this coordinator is stopping: another replica answers")

// Unavailable is the answer for err, a write or read refused for a
// reason that passes (corpusv1.RetryNotLeader, corpusv1.RetryBusy): code
// Unavailable with a corpusv1.Retry detail that RetryWithoutLeader reads.
func Unavailable(err error, reason string) *connect.Error {
	ce := connect.NewError(connect.CodeUnavailable, err)
	if d, derr := connect.NewErrorDetail(&corpusv1.Retry{Reason: reason, MaybeDone: errors.Is(err, ErrMaybeDone)}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}

// RetryOf returns the Retry detail of an Unavailable answer, nil when
// err is not one or carries none.
func RetryOf(err error) *corpusv1.Retry {
	var ce *connect.Error
	if connect.CodeOf(err) != connect.CodeUnavailable || !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if r, ok := v.(*corpusv1.Retry); ok {
				return r
			}
		}
	}
	return nil
}

// retryOf says whether err asks to be retried, and whether the write it
// answers may have taken effect. It reads the answer's Retry detail; an
// Unavailable answer without one, from a coordinator older than those
// details, is known by its phrases.
func retryOf(err error) (retry, maybeDone bool) {
	if r := RetryOf(err); r != nil {
		return true, r.MaybeDone
	}
	var ce *connect.Error
	if connect.CodeOf(err) != connect.CodeUnavailable || !errors.As(err, &ce) {
		return false, false
	}
	msg := ce.Message()
	if !strings.Contains(msg, NotLeaderPhrase) && !strings.Contains(msg, BusyPhrase) {
		return false, false
	}
	return true, strings.Contains(msg, MaybeDonePhrase)
}

// RetryWithoutLeader retries unary calls a coordinator refused for want
// of a Raft leader (an election in progress), or because they were
// busy (a full write queue, a replica behind), for up to max, with
// backoff.
// corpus writes are idempotent, so a write whose first answer was lost
// is safe to send again. A removal asked again that way may find
// nothing to remove because its earlier try removed it: its "not found"
// then carries the GoneHeader (see Gone).
func RetryWithoutLeader(max time.Duration) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			deadline := time.Now().Add(max)
			wait := 100 * time.Millisecond
			maybeDone := false
			for {
				res, err := next(ctx, req)
				if maybeDone && connect.CodeOf(err) == connect.CodeNotFound && removal(req.Spec().Procedure) {
					var ce *connect.Error
					if errors.As(err, &ce) {
						ce.Meta().Set(GoneHeader, "1")
					}
				}
				retry, done := retryOf(err)
				if !retry || time.Now().Add(wait).After(deadline) {
					return res, err
				}
				maybeDone = maybeDone || done
				select {
				case <-ctx.Done():
					return res, err
				case <-time.After(wait):
				}
				wait = min(2*wait, time.Second)
			}
		}
	}
}

// GoneHeader marks, in the metadata of a "not found" answer, a removal
// that RetryWithoutLeader asked again after an earlier try's answer said
// the write may have taken effect.
const GoneHeader = "Corpus-Gone-Already"

// removal says whether procedure removes something (Delete..., Remove...).
func removal(procedure string) bool {
	method := procedure[strings.LastIndex(procedure, "/")+1:]
	return strings.HasPrefix(method, "Delete") || strings.HasPrefix(method, "Remove")
}

// Gone says whether err is the "not found" of a removal whose earlier
// try, cut short by a leader change, may have removed the thing: what
// the caller asked for holds either way.
func Gone(err error) bool {
	var ce *connect.Error
	return connect.CodeOf(err) == connect.CodeNotFound && errors.As(err, &ce) && ce.Meta().Get(GoneHeader) != ""
}
