package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// testLogger discards logs unless CORPUS_TEST_LOG is set, since proxy logs
// may come after a parallel test has finished.
func testLogger() *slog.Logger {
	if os.Getenv("CORPUS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// startProxy runs a real proxy on 127.0.0.1 port 0 until the test ends.
func startProxy(t testing.TB, cfg Config) *Proxy {
	t.Helper()
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:0"
	}
	if cfg.TCPHost == "" {
		cfg.TCPHost = "127.0.0.1"
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
	return p
}

func mustSetRoutes(t testing.TB, p *Proxy, r Routes) {
	t.Helper()
	if err := p.SetRoutes(r); err != nil {
		t.Fatalf("SetRoutes: %v", err)
	}
}

func httpRoutes(hostTargets ...string) Routes {
	r := Routes{HTTP: map[string]HTTPRoute{}}
	for i := 0; i+1 < len(hostTargets); i += 2 {
		r.HTTP[hostTargets[i]] = HTTPRoute{Targets: []string{hostTargets[i+1]}}
	}
	return r
}

// backend is a real HTTP server on loopback that counts its connections.
type backend struct {
	*httptest.Server
	conns atomic.Int64
}

func (b *backend) addr() string { return b.Listener.Addr().String() }

// startBackend serves h, or by default answers 200 with name as the body.
func startBackend(t testing.TB, name string, h http.Handler) *backend {
	t.Helper()
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Backend", name)
			io.WriteString(w, name)
		})
	}
	b := &backend{Server: httptest.NewUnstartedServer(h)}
	b.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			b.conns.Add(1)
		}
	}
	b.Start()
	t.Cleanup(b.Close)
	return b
}

// proxyClient returns a keep-alive client that sends every request to addr
// whatever the URL's host, so URLs can name the routed host.
func proxyClient(t testing.TB, addr string, dials *atomic.Int64) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			if dials != nil {
				dials.Add(1)
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
		MaxIdleConnsPerHost: 64,
		DisableCompression:  true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

// do sends a request with the given Host and returns status and body.
func do(t testing.TB, c *http.Client, method, host, path string, body io.Reader) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, "http://proxy.invalid"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s%s: %v", method, host, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s%s: reading body: %v", method, host, path, err)
	}
	return resp.StatusCode, string(b), resp.Header
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t testing.TB) string {
	t.Helper()
	return testrun.FreeAddr(t)
}

// startDropper starts a target that reads each request's head and then
// resets the connection unanswered, as an instance killed while the
// request was in flight does; it returns its address.
func startDropper(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				c.Read(make([]byte, 4096))
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// startTCPEcho runs a TCP server on loopback. With a prefix it answers each
// line with prefix+line; without one it echoes bytes and half-closes at EOF.
func startTCPEcho(t testing.TB, prefix string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if prefix == "" {
					io.Copy(c, c)
					c.(*net.TCPConn).CloseWrite()
					io.Copy(io.Discard, c)
					return
				}
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := io.WriteString(c, prefix+sc.Text()+"\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// lineConn is a client connection through a TCP route.
type lineConn struct {
	net.Conn
	r *bufio.Reader
}

func dialLine(t testing.TB, port int) *lineConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
	if err != nil {
		t.Fatalf("dialing tcp route %d: %v", port, err)
	}
	t.Cleanup(func() { c.Close() })
	return &lineConn{Conn: c, r: bufio.NewReader(c)}
}

// roundTrip sends one line and returns the answer line.
func (c *lineConn) roundTrip(t testing.TB, line string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(testrun.D(5 * time.Second)))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatalf("writing %q: %v", line, err)
	}
	got, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading answer to %q: %v", line, err)
	}
	return strings.TrimSuffix(got, "\n")
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testrun.D(5 * time.Second))
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func isRefused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
