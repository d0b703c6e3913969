package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// rawClient is a client connection to the proxy that writes requests by
// hand and reads the answers with net/http's parser.
type rawClient struct {
	t testing.TB
	net.Conn
	r *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(testrun.D(10 * time.Second)))
	return &rawClient{t: t, Conn: c, r: bufio.NewReader(c)}
}

func (c *rawClient) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		c.t.Fatalf("writing request: %v", err)
	}
}

// read reads one answer to a request with method and its whole body.
func (c *rawClient) read(method string) (*http.Response, string) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.r, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("reading the answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("reading the body: %v", err)
	}
	resp.Body.Close()
	return resp, string(b)
}

// closed reports whether the proxy closed the connection (no more bytes).
func (c *rawClient) closed() bool {
	c.SetReadDeadline(time.Now().Add(testrun.D(5 * time.Second)))
	_, err := c.r.ReadByte()
	return err == io.EOF
}

// pathBackend answers the request's method, path and body.
func pathBackend(t testing.TB) *backend {
	return startBackend(t, "path", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.RequestURI(), b)
	}))
}

func TestH1Pipelined(t *testing.T) {
	t.Parallel()
	be := pathBackend(t)
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	c := dialRaw(t, p.HTTPAddr().String())
	c.send("GET /1 HTTP/1.1\r\nHost: app.test\r\n\r\n" +
		"POST /2?q=a%20b HTTP/1.1\r\nHost: app.test\r\nContent-Length: 4\r\n\r\nbody" +
		"POST /3 HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nch\r\n3\r\nunk\r\n0\r\n\r\n" +
		"GET /4 HTTP/1.1\r\nHost: app.test\r\n\r\n")
	c.send("GET /5 HTTP/1.1\r\nHost: app.test\r\nX-Big: " + strings.Repeat("b", 10<<10) + "\r\n\r\n")
	for _, want := range []string{"GET /1 ", "POST /2?q=a%20b body", "POST /3 chunk", "GET /4 ", "GET /5 "} {
		resp, body := c.read("GET")
		if resp.StatusCode != 200 || body != want {
			t.Errorf("pipelined answer = %d %q, want 200 %q", resp.StatusCode, body, want)
		}
	}
	if n := p.counters.handovers.Load(); n != 0 {
		t.Errorf("%d connections handed over to net/http, want 0", n)
	}
	if got := be.conns.Load(); got != 1 {
		t.Errorf("connections to the backend = %d, want 1", got)
	}
}

func TestH1ChunkedBothWays(t *testing.T) {
	t.Parallel()
	be := startBackend(t, "chunks", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("Trailer", "X-Sum")
		fmt.Fprintf(w, "got %q te=%v trailer=%q;", body, r.TransferEncoding, r.Trailer.Get("X-Check"))
		http.NewResponseController(w).Flush()
		io.WriteString(w, "second chunk")
		w.Header().Set("X-Sum", "42")
	}))
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	c := dialRaw(t, p.HTTPAddr().String())
	c.send("PUT / HTTP/1.1\r\nHost: app.test\r\nTransfer-Encoding: chunked\r\nTrailer: X-Check\r\n\r\n" +
		"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Check: yes\r\n\r\n")
	resp, body := c.read("PUT")
	want := `got "hello world" te=[chunked] trailer="yes";second chunk`
	if resp.StatusCode != 200 || body != want {
		t.Errorf("chunked PUT = %d %q, want 200 %q", resp.StatusCode, body, want)
	}
	if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Errorf("answer Transfer-Encoding = %v, want chunked", resp.TransferEncoding)
	}
	if got := resp.Trailer.Get("X-Sum"); got != "42" {
		t.Errorf("answer trailer X-Sum = %q, want 42", got)
	}
	// The connection goes on.
	c.send("GET / HTTP/1.1\r\nHost: app.test\r\n\r\n")
	if resp, _ := c.read("GET"); resp.StatusCode != 200 {
		t.Errorf("GET after the chunked exchange = %d", resp.StatusCode)
	}
}

func TestH1LargeAnswers(t *testing.T) {
	t.Parallel()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB
	be := startBackend(t, "big", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/length" {
			w.Header().Set("Content-Length", strconv.Itoa(len(payload)))
		}
		w.Write(payload)
	}))
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	c := proxyClient(t, p.HTTPAddr().String(), nil)
	for _, path := range []string{"/length", "/chunked", "/length"} {
		status, body, _ := do(t, c, "GET", "app.test", path, nil)
		if status != 200 || body != string(payload) {
			t.Errorf("GET %s = %d, %d bytes; want 200 and the %d bytes sent", path, status, len(body), len(payload))
		}
	}
}

func TestH1NoBodyAnswers(t *testing.T) {
	t.Parallel()
	be := startBackend(t, "nobody", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(204)
		case "/304":
			w.WriteHeader(304)
		default:
			w.Header().Set("Content-Length", "100")
			if r.Method != "HEAD" {
				w.Write(bytes.Repeat([]byte("x"), 100))
			}
		}
	}))
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	c := dialRaw(t, p.HTTPAddr().String())
	for _, tc := range []struct {
		method, path string
		status       int
		length       int64
	}{
		{"HEAD", "/", 200, 100},
		{"GET", "/204", 204, 0},
		{"GET", "/304", 304, 0},
		{"GET", "/", 200, 100},
		{"HEAD", "/", 200, 100},
	} {
		c.send(tc.method + " " + tc.path + " HTTP/1.1\r\nHost: app.test\r\n\r\n")
		resp, body := c.read(tc.method)
		if resp.StatusCode != tc.status || resp.ContentLength != tc.length {
			t.Errorf("%s %s = %d length %d, want %d length %d", tc.method, tc.path, resp.StatusCode, resp.ContentLength, tc.status, tc.length)
		}
		if wantBody := tc.method == "GET" && tc.status == 200; (body != "") != wantBody {
			t.Errorf("%s %s body = %d bytes", tc.method, tc.path, len(body))
		}
	}
}

func TestH1ConnectionClose(t *testing.T) {
	t.Parallel()
	be := pathBackend(t)
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	c := dialRaw(t, p.HTTPAddr().String())
	c.send("GET /bye HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n")
	resp, body := c.read("GET")
	if resp.StatusCode != 200 || body != "GET /bye " || !resp.Close {
		t.Errorf("GET with Connection: close = %d %q close=%v, want 200 and Connection: close", resp.StatusCode, body, resp.Close)
	}
	if !c.closed() {
		t.Error("connection still open after an answer with Connection: close")
	}
}

func TestH1BadRequests(t *testing.T) {
	t.Parallel()
	be := pathBackend(t)
	p := startProxy(t, Config{MaxHeaderBytes: 1 << 10})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	tests := []struct {
		name, req string
		status    int
	}{
		{"header without colon", "GET / HTTP/1.1\r\nHost: app.test\r\nBad Header\r\n\r\n", 400},
		{"space before colon", "GET / HTTP/1.1\r\nHost : app.test\r\n\r\n", 400},
		{"no host", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", 400},
		{"two hosts", "GET / HTTP/1.1\r\nHost: app.test\r\nHost: other.test\r\n\r\n", 400},
		{"bad content length", "POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 1x\r\n\r\n", 400},
		{"length and chunked: net/http's call", "POST / HTTP/1.1\r\nHost: app.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 200},
		{"bad escape", "GET /%zz HTTP/1.1\r\nHost: app.test\r\n\r\n", 400},
		{"header too large", "GET / HTTP/1.1\r\nHost: app.test\r\nX-Big: " + strings.Repeat("x", 8<<10) + "\r\n\r\n", 431},
		{"lenient line ends are served", "GET /lf HTTP/1.1\nHost: app.test\n\n", 200},
		{"HTTP/1.0 is served", "GET /10 HTTP/1.0\r\nHost: app.test\r\n\r\n", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := dialRaw(t, p.HTTPAddr().String())
			c.send(tc.req)
			if resp, body := c.read("GET"); resp.StatusCode != tc.status {
				t.Errorf("%q = %d %q, want %d", tc.req, resp.StatusCode, body, tc.status)
			}
		})
	}
}

func TestH1SlowAnswer(t *testing.T) {
	t.Parallel()
	be := startBackend(t, "slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			// Headers in time, a body that takes longer than the header
			// timeout: served whole.
			w.Header().Set("Content-Length", "4")
			io.WriteString(w, "sl")
			http.NewResponseController(w).Flush()
			time.Sleep(400 * time.Millisecond)
			io.WriteString(w, "ow")
			return
		}
		time.Sleep(time.Second)
	}))
	p := startProxy(t, Config{ResponseHeaderTimeout: 200 * time.Millisecond})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	c := dialRaw(t, p.HTTPAddr().String())
	c.send("GET /body HTTP/1.1\r\nHost: app.test\r\n\r\n")
	if resp, body := c.read("GET"); resp.StatusCode != 200 || body != "slow" {
		t.Errorf("slow body = %d %q, want 200 slow", resp.StatusCode, body)
	}
	start := time.Now()
	c.send("GET /headers HTTP/1.1\r\nHost: app.test\r\n\r\n")
	if resp, body := c.read("GET"); resp.StatusCode != 504 || !strings.Contains(body, "did not answer in time") {
		t.Errorf("slow headers = %d %q, want 504", resp.StatusCode, body)
	}
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("504 after %v, want about the 200ms header timeout", d)
	}
}

// TestH1TargetClosedIdle: a target that closes idle keep-alive connections
// costs no request a failure, with a body or without.
func TestH1TargetClosedIdle(t *testing.T) {
	t.Parallel()
	be := &backend{Server: httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))}
	be.Config.IdleTimeout = 50 * time.Millisecond
	be.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			be.conns.Add(1)
		}
	}
	be.Start()
	t.Cleanup(be.Close)
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	c := proxyClient(t, p.HTTPAddr().String(), nil)
	for i := range 6 {
		method, body := "GET", io.Reader(nil)
		if i%2 == 1 {
			method, body = "POST", strings.NewReader("payload")
		}
		if status, got, _ := do(t, c, method, "app.test", "/", body); status != 200 || got != "ok" {
			t.Errorf("%s %d after the target closed its idle connections = %d %q", method, i, status, got)
		}
		time.Sleep(150 * time.Millisecond)
	}
	if got := be.conns.Load(); got < 5 {
		t.Errorf("target connections = %d, want a new one after each idle close", got)
	}
}

// rawBackend answers each request with the raw response given, and closes
// the connection after an HTTP/1.0 one.
func rawBackend(t testing.TB, response string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	answer := []byte(response)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadSlice('\n')
					if err != nil {
						return
					}
					if len(line) <= 2 {
						if _, err := c.Write(answer); err != nil || strings.HasPrefix(response, "HTTP/1.0") {
							return
						}
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestH1AnswerHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, response string
		check          func(t *testing.T, resp *http.Response, body string)
	}{
		{"hop-by-hop headers dropped, Date added",
			"HTTP/1.1 200 Fine\r\nConnection: X-Secret\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\nX-Kept: yes\r\nContent-Length: 2\r\n\r\nok",
			func(t *testing.T, resp *http.Response, body string) {
				if resp.Header.Get("X-Secret") != "" || resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-Kept") != "yes" {
					t.Errorf("headers = %v, want X-Kept only", resp.Header)
				}
				if _, err := http.ParseTime(resp.Header.Get("Date")); err != nil {
					t.Errorf("Date = %q, want one added", resp.Header.Get("Date"))
				}
				if resp.Status != "200 Fine" || body != "ok" {
					t.Errorf("answer = %q %q, want 200 Fine ok", resp.Status, body)
				}
			}},
		{"delimited by the end of the connection",
			"HTTP/1.0 200 OK\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\n\r\nuntil the end",
			func(t *testing.T, resp *http.Response, body string) {
				if body != "until the end" || !resp.Close || resp.Header.Get("Date") != "Thu, 01 Jan 2026 00:00:00 GMT" {
					t.Errorf("answer = %q close=%v %v, want the body and Connection: close", body, resp.Close, resp.Header)
				}
			}},
		{"malformed", "HTTP/1.1 2xx OK\r\n\r\n",
			func(t *testing.T, resp *http.Response, body string) {
				if resp.StatusCode != 502 || !strings.Contains(body, "bad response") {
					t.Errorf("answer = %d %q, want 502", resp.StatusCode, body)
				}
			}},
		{"head larger than a buffer",
			"HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 10<<10) + "\r\nContent-Length: 3\r\n\r\nbig",
			func(t *testing.T, resp *http.Response, body string) {
				if len(resp.Header.Get("X-Big")) != 10<<10 || body != "big" {
					t.Errorf("answer = %d-byte X-Big, body %q; want 10 KiB and big", len(resp.Header.Get("X-Big")), body)
				}
			}},
		{"early hints passed on",
			"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nmain",
			func(t *testing.T, resp *http.Response, body string) {
				if resp.StatusCode != 200 || body != "main" {
					t.Errorf("answer = %d %q, want 200 main", resp.StatusCode, body)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startProxy(t, Config{})
			mustSetRoutes(t, p, httpRoutes("app.test", rawBackend(t, tc.response)))
			c := proxyClient(t, p.HTTPAddr().String(), nil)
			var hints []int
			req, _ := http.NewRequest("GET", "http://proxy.invalid/", nil)
			req.Host = "app.test"
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, _ textproto.MIMEHeader) error { hints = append(hints, code); return nil },
			}))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			tc.check(t, resp, string(body))
			if strings.HasPrefix(tc.response, "HTTP/1.1 103") && (len(hints) != 1 || hints[0] != 103) {
				t.Errorf("informational answers = %v, want [103]", hints)
			}
		})
	}
}

// TestH1HTTPSHandover: X-Forwarded-Proto is https on the lean path and on
// a TLS connection it handed over to net/http.
func TestH1HTTPSHandover(t *testing.T) {
	t.Parallel()
	files, cert := selfSigned(t, t.TempDir(), "a", "app.test")
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	be := startBackend(t, "proto", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("X-Forwarded-Proto"))
	}))
	p := startProxy(t, Config{HTTPSAddr: "127.0.0.1:0", Certs: []CertFiles{files}})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	for _, tc := range []struct {
		name, header string
		handedOver   bool
	}{
		{"lean", "", false},
		{"handed over", "Expect: 100-continue\r\nContent-Length: 0\r\n", true},
	} {
		before := p.counters.handovers.Load()
		tc0, err := tls.Dial("tcp", p.HTTPSAddr().String(), &tls.Config{RootCAs: roots, ServerName: "app.test", NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		c := &rawClient{t: t, Conn: tc0, r: bufio.NewReader(tc0)}
		c.SetDeadline(time.Now().Add(testrun.D(10 * time.Second)))
		for range 2 {
			c.send("GET / HTTP/1.1\r\nHost: app.test\r\n" + tc.header + "\r\n")
			if resp, body := c.read("GET"); resp.StatusCode != 200 || body != "https" {
				t.Errorf("%s: answer = %d %q, want 200 https", tc.name, resp.StatusCode, body)
			}
		}
		c.Close()
		if got := p.counters.handovers.Load() - before; (got == 1) != tc.handedOver {
			t.Errorf("%s: %d connections handed over", tc.name, got)
		}
	}
}

// TestH1ClientGoneWhileTargetSlow: a client that goes away while its target
// takes its time cuts the exchange: the target sees its request end, and
// the request counts as 499.
func TestH1ClientGoneWhileTargetSlow(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	cancelled := make(chan struct{})
	be := startBackend(t, "slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(testrun.D(10 * time.Second)):
		}
	}))
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	c := dialRaw(t, p.HTTPAddr().String())
	c.send("GET / HTTP/1.1\r\nHost: app.test\r\n\r\n")
	<-started
	c.Close()
	select {
	case <-cancelled:
	case <-time.After(testrun.D(5 * time.Second)):
		t.Fatal("the target's request went on after its client left")
	}
	waitFor(t, "the request to count as 499", func() bool { return p.Stats().Errors[statusClientGone] == 1 })
}

// TestH1DrainAnswersThenCloses: a stopping proxy still serves a request that
// comes on a kept-alive connection while it drains, tells the client to
// close, and closes it; idle connections are closed.
func TestH1DrainAnswersThenCloses(t *testing.T) {
	t.Parallel()
	be := pathBackend(t)
	p, err := New(Config{HTTPAddr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	busy, idle := dialRaw(t, p.HTTPAddr().String()), dialRaw(t, p.HTTPAddr().String())
	for _, c := range []*rawClient{busy, idle} {
		c.send("GET /before HTTP/1.1\r\nHost: app.test\r\n\r\n")
		if resp, _ := c.read("GET"); resp.StatusCode != 200 || resp.Close {
			t.Fatalf("before the stop = %d close=%v, want 200 kept alive", resp.StatusCode, resp.Close)
		}
	}
	cancel()
	time.Sleep(100 * time.Millisecond)
	busy.send("GET /during HTTP/1.1\r\nHost: app.test\r\n\r\n")
	if resp, body := busy.read("GET"); resp.StatusCode != 200 || body != "GET /during " || !resp.Close {
		t.Errorf("while draining = %d %q close=%v, want 200 and Connection: close", resp.StatusCode, body, resp.Close)
	}
	if !busy.closed() || !idle.closed() {
		t.Error("connections left open by a stopped proxy")
	}
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// TestH1ACMEChallengeGoesToHandler: a request under the ACME challenge path
// is left to handler.ServeHTTP, where a challenge is answered before
// routing (until then, it is proxied like any other).
func TestH1ACMEChallengeGoesToHandler(t *testing.T) {
	t.Parallel()
	be := pathBackend(t)
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	c := dialRaw(t, p.HTTPAddr().String())
	c.send("GET /.well-known/acme-challenge/token HTTP/1.1\r\nHost: app.test\r\n\r\n")
	if resp, body := c.read("GET"); resp.StatusCode != 200 || body != "GET /.well-known/acme-challenge/token " {
		t.Errorf("challenge path = %d %q", resp.StatusCode, body)
	}
	if n := p.counters.handovers.Load(); n != 1 {
		t.Errorf("%d connections handed over to net/http, want 1", n)
	}
}

// TestH1SlowUpload: an upload that takes longer than the response header
// timeout is not cut: the timeout runs from the end of the body.
func TestH1SlowUpload(t *testing.T) {
	t.Parallel()
	be := startBackend(t, "upload", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "got %d bytes", len(b))
	}))
	p := startProxy(t, Config{ResponseHeaderTimeout: 200 * time.Millisecond})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	c := proxyClient(t, p.HTTPAddr().String(), nil)
	for _, chunked := range []bool{true, false} {
		pr, pw := io.Pipe()
		go func() {
			for range 6 {
				time.Sleep(100 * time.Millisecond)
				pw.Write([]byte("0123456789"))
			}
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", "http://proxy.invalid/", pr)
		req.Host = "app.test"
		if !chunked {
			req.ContentLength = 60
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "got 60 bytes" {
			t.Errorf("600ms upload (chunked %v) = %d %q, want 200 got 60 bytes", chunked, resp.StatusCode, body)
		}
	}
}

// TestH1TargetGoneWhileKeptAlive: a target that goes away entirely (a
// killed instance) while the proxy keeps connections to it open: an
// idempotent request sent on one of them goes to another target, not
// back as a 502.
func TestH1TargetGoneWhileKeptAlive(t *testing.T) {
	t.Parallel()
	a, b := startBackend(t, "a", nil), startBackend(t, "b", nil)
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, Routes{HTTP: map[string]HTTPRoute{"app.test": {Targets: []string{a.addr(), b.addr()}}}})
	c := proxyClient(t, p.HTTPAddr().String(), nil)
	seen := map[string]bool{}
	for range 4 {
		status, got, _ := do(t, c, "GET", "app.test", "/", nil)
		if status != 200 {
			t.Fatalf("GET = %d %q", status, got)
		}
		seen[got] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("answers before = %v, want both targets", seen)
	}
	a.CloseClientConnections()
	a.Close()
	for i := range 6 {
		if status, got, _ := do(t, c, "GET", "app.test", "/", nil); status != 200 || got != "b" {
			t.Errorf("GET %d after target a went away = %d %q, want b's answer", i, status, got)
		}
	}
}

// TestH1TargetDiesMidRequest: a target that takes a request on a new
// connection and drops it unanswered (an instance killed while the
// request was in flight) costs an idempotent request nothing: it is
// sent to another target, as nginx's proxy_next_upstream does. A
// request with a body is never sent twice.
func TestH1TargetDiesMidRequest(t *testing.T) {
	t.Parallel()
	dropper := startDropper(t)
	b := startBackend(t, "b", nil)
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, Routes{HTTP: map[string]HTTPRoute{"app.test": {Targets: []string{dropper, b.addr()}}}})
	c := proxyClient(t, p.HTTPAddr().String(), nil)
	for i := range 6 {
		if status, got, _ := do(t, c, "GET", "app.test", "/", nil); status != 200 || got != "b" {
			t.Errorf("GET %d with a target that drops requests = %d %q, want b's answer", i, status, got)
		}
	}
	mustSetRoutes(t, p, Routes{HTTP: map[string]HTTPRoute{"app.test": {Targets: []string{dropper}}}})
	if status, _, _ := do(t, c, "POST", "app.test", "/", strings.NewReader("payload")); status != 502 {
		t.Errorf("POST to a target that drops it = %d, want 502 (never sent twice)", status)
	}
}
