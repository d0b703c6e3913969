// Package rpc holds what every corpus API client and server shares: the
// HTTP client and server settings and the bearer-token interceptor.
package rpc

import (
	"context"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/netutil"
)

// HTTPClient returns a client for corpus APIs. It speaks HTTP/1.1 and
// cleartext HTTP/2, so server streams work either way.
func HTTPClient() *http.Client {
	t := &http.Transport{
		Proxy:               nil, // cluster traffic never goes through a proxy from the environment
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		Protocols:           new(http.Protocols),
	}
	t.Protocols.SetHTTP1(true)
	t.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: t}
}

// NewServer returns an HTTP server for a corpus API with timeouts that keep
// slow or idle clients from holding connections forever. Streams (watch,
// exec) are long-lived, so there is no write timeout.
func NewServer(h http.Handler) *http.Server {
	s := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		Protocols:         new(http.Protocols),
	}
	s.Protocols.SetHTTP1(true)
	s.Protocols.SetUnencryptedHTTP2(true)
	return s
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

// NodeCredentialPrefix starts every node agent's bearer token.
const NodeCredentialPrefix = "node."

// CoordinatorCredentialPrefix starts the bearer token replicas present to
// each other: the prefix and the cluster's coordinator key.
const CoordinatorCredentialPrefix = "coord."

// NodeCredential is the bearer token of an enrolled node agent.
func NodeCredential(nodeID, nodeSecret string) string {
	return NodeCredentialPrefix + nodeID + "." + nodeSecret
}

// Bearer returns a client interceptor that sends token as the credential.
func Bearer(token string) connect.Interceptor { return bearer(token) }

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

// RetryWithoutLeader retries unary calls a coordinator refused for want
// of a Raft leader (an election in progress) for up to max, with backoff.
// corpus writes are idempotent, so a write whose first answer was lost
// is safe to send again.
func RetryWithoutLeader(max time.Duration) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			deadline := time.Now().Add(max)
			wait := 100 * time.Millisecond
			for {
				res, err := next(ctx, req)
				if err == nil || connect.CodeOf(err) != connect.CodeUnavailable ||
					!strings.Contains(err.Error(), "not the raft leader") || time.Now().Add(wait).After(deadline) {
					return res, err
				}
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
