package proxy

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"corpus/internal/testrun"
)

func TestHTTPRoutingByHost(t *testing.T) {
	t.Parallel()
	a := startBackend(t, "a", nil)
	b := startBackend(t, "b", nil)
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("app.test", a.addr(), "other.test", b.addr()))
	c := proxyClient(t, p.HTTPAddr().String(), nil)

	tests := []struct {
		host       string
		wantStatus int
		wantBody   string
	}{
		{"app.test", 200, "a"},
		{"APP.Test", 200, "a"},
		{"app.test:8080", 200, "a"},
		{"App.Test:80", 200, "a"},
		{"app.test.", 200, "a"},
		{"other.test", 200, "b"},
		{"unknown.test", 404, "no route for host unknown.test\n"},
		{"Unknown.Test:81", 404, "no route for host unknown.test\n"},
		{"sub.app.test", 404, "no route for host sub.app.test\n"},
	}
	for _, tc := range tests {
		status, body, hdr := do(t, c, "GET", tc.host, "/", nil)
		if status != tc.wantStatus || body != tc.wantBody {
			t.Errorf("GET Host %q = %d %q, want %d %q", tc.host, status, body, tc.wantStatus, tc.wantBody)
		}
		if status == 404 && hdr.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("GET Host %q: Content-Type = %q, want text/plain", tc.host, hdr.Get("Content-Type"))
		}
	}
	if got := p.Stats().Errors[404]; got != 3 {
		t.Errorf("Stats().Errors[404] = %d, want 3", got)
	}
}

func TestHTTPKeepAlive(t *testing.T) {
	t.Parallel()
	be := startBackend(t, "a", nil)
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	var dials atomic.Int64
	c := proxyClient(t, p.HTTPAddr().String(), &dials)

	const n = 50
	for i := range n {
		method, body := "GET", io.Reader(nil)
		switch i % 3 {
		case 1:
			method, body = "POST", strings.NewReader("form=1") // known length
		case 2:
			method, body = "PUT", io.MultiReader(strings.NewReader("chunked")) // unknown length
		}
		if status, got, _ := do(t, c, method, "app.test", "/", body); status != 200 || got != "a" {
			t.Fatalf("%s = %d %q, want 200 \"a\"", method, status, got)
		}
	}
	if got := dials.Load(); got != 1 {
		t.Errorf("client connections to the proxy = %d for %d requests, want 1", got, n)
	}
	if got := be.conns.Load(); got != 1 {
		t.Errorf("proxy connections to the backend = %d for %d requests, want 1", got, n)
	}
	if got := p.Stats().Conns; got != 1 {
		t.Errorf("Stats().Conns = %d, want 1", got)
	}
	if s := p.Stats(); s.Requests != n || s.Responses[200] != n {
		t.Errorf("Stats() requests %d, responses[200] %d; want %d each", s.Requests, s.Responses[200], n)
	}
}

func TestHTTPRoundRobin(t *testing.T) {
	t.Parallel()
	a := startBackend(t, "a", nil)
	b := startBackend(t, "b", nil)
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, Routes{HTTP: map[string]HTTPRoute{"app.test": {Targets: []string{a.addr(), b.addr()}}}})
	c := proxyClient(t, p.HTTPAddr().String(), nil)
	got := map[string]int{}
	for range 10 {
		_, body, _ := do(t, c, "GET", "app.test", "/", nil)
		got[body]++
	}
	if got["a"] != 5 || got["b"] != 5 {
		t.Errorf("10 requests over 2 targets went %v, want 5 each", got)
	}
}

func TestHTTPFailoverOnDialError(t *testing.T) {
	t.Parallel()
	good := startBackend(t, "good", nil)
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, Routes{HTTP: map[string]HTTPRoute{
		"app.test": {Targets: []string{closedAddr(t), good.addr()}},
	}})
	c := proxyClient(t, p.HTTPAddr().String(), nil)

	// A request with a body is not sent twice: the first POST starts on
	// the dead target and gets 502; that takes the target out of
	// rotation (health.go), so the POSTs after it all reach the live one.
	var statuses []int
	for range 4 {
		status, _, _ := do(t, c, "POST", "app.test", "/", strings.NewReader("payload"))
		statuses = append(statuses, status)
	}
	if !slices.Equal(statuses, []int{502, 200, 200, 200}) {
		t.Errorf("4 POSTs over a dead and a live target = %v, want 502 once, then 200 from the live one", statuses)
	}
	for _, method := range []string{"GET", "HEAD", "GET", "OPTIONS", "DELETE", "GET"} {
		if status, _, _ := do(t, c, method, "app.test", "/", nil); status != 200 {
			t.Errorf("%s with a dead first target = %d, want 200 from the next target", method, status)
		}
	}
}

// TestFailoverTransportDropped: the net/http path (HTTPS, HTTP/2) sends
// an idempotent request that a target dropped unanswered to the next
// target, as the lean HTTP/1 path does (TestH1TargetDiesMidRequest).
func TestFailoverTransportDropped(t *testing.T) {
	t.Parallel()
	good := startBackend(t, "good", nil)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	rt := &httpRoute{host: "app.test", targets: []string{startDropper(t), good.addr()}}
	ft := &failoverTransport{route: rt, base: tr, log: slog.New(slog.DiscardHandler)}
	for _, method := range []string{"GET", "HEAD", "DELETE"} {
		req, err := http.NewRequest(method, "http://"+rt.targets[0]+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := ft.RoundTrip(req)
		if err != nil {
			t.Errorf("%s with a first target that drops it: %v, want the next target's answer", method, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Backend") != "good" {
			t.Errorf("%s with a first target that drops it = %d from %q, want 200 from good", method, resp.StatusCode, resp.Header.Get("X-Backend"))
		}
	}
	req, _ := http.NewRequest("POST", "http://"+rt.targets[0]+"/", strings.NewReader("payload"))
	if resp, err := ft.RoundTrip(req); err == nil {
		resp.Body.Close()
		t.Errorf("POST to a target that drops it = %d, want the error (a body is never sent twice)", resp.StatusCode)
	}
}

func TestHTTPBadGatewayForClosedPort(t *testing.T) {
	t.Parallel()
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, Routes{HTTP: map[string]HTTPRoute{
		"one.test": {Targets: []string{closedAddr(t)}},
		"two.test": {Targets: []string{closedAddr(t), closedAddr(t)}},
	}})
	c := proxyClient(t, p.HTTPAddr().String(), nil)
	for _, host := range []string{"one.test", "two.test"} {
		status, body, _ := do(t, c, "GET", host, "/", nil)
		if status != 502 || !strings.Contains(body, "cannot be reached") {
			t.Errorf("GET %s with no live target = %d %q, want 502 cannot be reached", host, status, body)
		}
	}
	if got := p.Stats().Errors[502]; got != 2 {
		t.Errorf("Stats().Errors[502] = %d, want 2", got)
	}
}

func TestHTTPGatewayTimeout(t *testing.T) {
	t.Parallel()
	// A target that accepts and reads but never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			go io.Copy(io.Discard, c)
		}
	}()
	p := startProxy(t, Config{ResponseHeaderTimeout: 200 * time.Millisecond})
	mustSetRoutes(t, p, httpRoutes("slow.test", ln.Addr().String()))
	c := proxyClient(t, p.HTTPAddr().String(), nil)

	start := time.Now()
	status, body, _ := do(t, c, "GET", "slow.test", "/", nil)
	if status != 504 || !strings.Contains(body, "did not answer in time") {
		t.Errorf("GET to a silent target = %d %q, want 504", status, body)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("504 took %v, want about the 200ms header timeout", d)
	}
	if s := p.Stats(); s.Errors[504] != 1 || s.Errors[502] != 0 {
		t.Errorf("Stats().Errors = %v, want one 504 and no 502", s.Errors)
	}
}

func TestHTTPForwardedHeaders(t *testing.T) {
	t.Parallel()
	echo := startBackend(t, "echo", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host=%s xff=%s xfp=%s xfh=%s fwd=%s",
			r.Host, strings.Join(r.Header.Values("X-Forwarded-For"), "|"),
			r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Host"), r.Header.Get("Forwarded"))
	}))
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	other := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	tests := []struct {
		name    string
		trusted []netip.Prefix
		headers map[string]string
		want    string
	}{
		{name: "plain", want: "host=app.test:8080 xff=127.0.0.1 xfp=http xfh=app.test:8080 fwd="},
		{name: "spoofed from untrusted client is replaced",
			headers: map[string]string{"X-Forwarded-For": "6.6.6.6", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.test", "Forwarded": "for=6.6.6.6"},
			want:    "host=app.test:8080 xff=127.0.0.1 xfp=http xfh=app.test:8080 fwd="},
		{name: "client outside the trusted prefixes is replaced", trusted: other,
			headers: map[string]string{"X-Forwarded-For": "6.6.6.6"},
			want:    "host=app.test:8080 xff=127.0.0.1 xfp=http xfh=app.test:8080 fwd="},
		{name: "trusted proxy is appended to", trusted: loopback,
			headers: map[string]string{"X-Forwarded-For": "203.0.113.7, 198.51.100.2", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "www.example.com"},
			want:    "host=app.test:8080 xff=203.0.113.7, 198.51.100.2, 127.0.0.1 xfp=https xfh=www.example.com fwd="},
		{name: "trusted proxy without headers", trusted: loopback,
			want: "host=app.test:8080 xff=127.0.0.1 xfp=http xfh=app.test:8080 fwd="},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startProxy(t, Config{TrustedProxies: tc.trusted})
			mustSetRoutes(t, p, httpRoutes("app.test", echo.addr()))
			c := proxyClient(t, p.HTTPAddr().String(), nil)
			req, _ := http.NewRequest("GET", "http://proxy.invalid/", nil)
			req.Host = "app.test:8080"
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if string(got) != tc.want {
				t.Errorf("target saw %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHTTPStreamingResponse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header map[string]string
	}{
		{name: "chunked"},
		{name: "server-sent events", header: map[string]string{"Content-Type": "text/event-stream"}},
		{name: "known length", header: map[string]string{"Content-Length": "14"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			be := startBackend(t, "stream", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				io.WriteString(w, "chunk1\n")
				http.NewResponseController(w).Flush()
				<-release // the client must see chunk1 before this
				io.WriteString(w, "chunk2\n")
			}))
			p := startProxy(t, Config{})
			mustSetRoutes(t, p, httpRoutes("stream.test", be.addr()))
			c := proxyClient(t, p.HTTPAddr().String(), nil)
			req, _ := http.NewRequest("GET", "http://proxy.invalid/", nil)
			req.Host = "stream.test"
			resp, err := c.Do(req)
			if err != nil {
				close(release)
				t.Fatal(err)
			}
			defer resp.Body.Close()
			r := bufio.NewReader(resp.Body)
			first := make(chan string, 1)
			go func() {
				line, _ := r.ReadString('\n')
				first <- line
			}()
			select {
			case line := <-first:
				if line != "chunk1\n" {
					t.Errorf("first chunk = %q, want chunk1", line)
				}
			case <-time.After(testrun.D(5 * time.Second)):
				t.Error("first chunk did not arrive while the target held the rest: the proxy buffers")
			}
			close(release)
			rest, err := io.ReadAll(r)
			if err != nil || string(rest) != "chunk2\n" {
				t.Errorf("rest = %q, %v; want chunk2", rest, err)
			}
		})
	}
}

func TestHTTPStreamingRequest(t *testing.T) {
	t.Parallel()
	lines := make(chan string, 10)
	be := startBackend(t, "upload", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc := bufio.NewScanner(r.Body)
		n := 0
		for sc.Scan() {
			lines <- sc.Text()
			n++
		}
		fmt.Fprintf(w, "got %d lines", n)
	}))
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("upload.test", be.addr()))
	c := proxyClient(t, p.HTTPAddr().String(), nil)

	pr, pw := io.Pipe()
	type result struct {
		status int
		body   string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://proxy.invalid/", pr)
		req.Host = "upload.test"
		resp, err := c.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{resp.StatusCode, string(b), err}
	}()
	for i := range 3 {
		want := fmt.Sprintf("line %d", i)
		io.WriteString(pw, want+"\n")
		select {
		case got := <-lines:
			if got != want {
				t.Fatalf("target read %q, want %q", got, want)
			}
		case <-time.After(testrun.D(5 * time.Second)):
			pw.CloseWithError(io.ErrUnexpectedEOF)
			t.Fatalf("target did not get %q before the client sent more: the proxy buffers request bodies", want)
		}
	}
	pw.Close()
	res := <-done
	if res.err != nil || res.status != 200 || res.body != "got 3 lines" {
		t.Errorf("streamed POST = %d %q %v, want 200 \"got 3 lines\"", res.status, res.body, res.err)
	}
}

func TestHTTPLargeBodies(t *testing.T) {
	t.Parallel()
	// The target answers while it still reads the upload (full duplex):
	// the proxy must keep streaming the request body while it streams the
	// response back.
	be := startBackend(t, "echo", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).EnableFullDuplex()
		io.Copy(w, r.Body)
	}))
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("big.test", be.addr()))
	c := proxyClient(t, p.HTTPAddr().String(), nil)
	payload := strings.Repeat("0123456789abcdef", 1<<18) // 4 MiB
	for range 3 {
		status, body, _ := do(t, c, "PUT", "big.test", "/", strings.NewReader(payload))
		if status != 200 || body != payload {
			t.Fatalf("PUT 4 MiB echo = %d, %d bytes back; want 200 and the same %d bytes", status, len(body), len(payload))
		}
	}
}

// TestHTTPEarlyAnswerToUpload: a target that answers before reading a large
// upload (a 413, an auth failure) gets its answer to the client, and the
// client's next request works.
func TestHTTPEarlyAnswerToUpload(t *testing.T) {
	t.Parallel()
	be := startBackend(t, "early", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "PUT" {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		io.WriteString(w, "ok")
	}))
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))
	c := proxyClient(t, p.HTTPAddr().String(), nil)
	upload := strings.Repeat("x", 8<<20)
	req, _ := http.NewRequest("PUT", "http://proxy.invalid/", strings.NewReader(upload))
	req.Host = "app.test"
	resp, err := c.Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 || string(b) != "too large\n" {
			t.Errorf("8 MiB PUT answered early = %d %q, want 413 too large", resp.StatusCode, b)
		}
	} else if !strings.Contains(err.Error(), "reset") && !strings.Contains(err.Error(), "broken pipe") {
		// The client may see its upload cut instead of the early answer,
		// as with any HTTP/1 server; nothing else is acceptable.
		t.Errorf("8 MiB PUT answered early: %v", err)
	}
	for range 3 {
		if status, body, _ := do(t, c, "GET", "app.test", "/", nil); status != 200 || body != "ok" {
			t.Errorf("GET after the early answer = %d %q, want 200 ok", status, body)
		}
	}
}

func TestHTTPServerLimits(t *testing.T) {
	t.Parallel()
	be := startBackend(t, "a", nil)
	p := startProxy(t, Config{MaxHeaderBytes: 4 << 10, ReadHeaderTimeout: 200 * time.Millisecond})
	mustSetRoutes(t, p, httpRoutes("app.test", be.addr()))

	t.Run("header too large", func(t *testing.T) {
		c := proxyClient(t, p.HTTPAddr().String(), nil)
		req, _ := http.NewRequest("GET", "http://proxy.invalid/", nil)
		req.Host = "app.test"
		req.Header.Set("X-Big", strings.Repeat("x", 32<<10))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("32 KiB header = %d, want 431", resp.StatusCode)
		}
	})
	t.Run("slow headers", func(t *testing.T) {
		conn, err := net.Dial("tcp", p.HTTPAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, "GET / HTTP/1.1\r\nHost: app.test\r\n") // never finished
		conn.SetReadDeadline(time.Now().Add(testrun.D(5 * time.Second)))
		start := time.Now()
		_, err = io.ReadAll(conn)
		if err != nil {
			t.Fatalf("connection with unfinished headers not closed by the server: %v", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("unfinished headers closed after %v, want about 200ms", d)
		}
	})
}

// TestHTTPSwapUnderLoad moves a host between two targets hundreds of times
// while clients hammer it: not one request may fail.
func TestHTTPSwapUnderLoad(t *testing.T) {
	t.Parallel()
	jitter := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
			io.WriteString(w, name)
		})
	}
	a := startBackend(t, "a", jitter("a"))
	b := startBackend(t, "b", jitter("b"))
	p := startProxy(t, Config{})
	routeA := httpRoutes("app.test", a.addr())
	routeB := httpRoutes("app.test", b.addr())
	mustSetRoutes(t, p, routeA)

	const clients, swaps = 16, 400
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	served := map[string]int{}
	bad := map[string]int{}
	for range clients {
		c := proxyClient(t, p.HTTPAddr().String(), nil)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", "http://proxy.invalid/", nil)
				req.Host = "app.test"
				resp, err := c.Do(req)
				var key string
				switch {
				case err != nil:
					key = err.Error()
				default:
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					key = string(body)
					if resp.StatusCode != 200 {
						key = fmt.Sprintf("%d %s", resp.StatusCode, body)
					}
				}
				mu.Lock()
				if key == "a" || key == "b" {
					served[key]++
				} else {
					bad[key]++
				}
				mu.Unlock()
			}
		})
	}
	for i := range swaps {
		r := routeA
		if i%2 == 0 {
			r = routeB
		}
		mustSetRoutes(t, p, r)
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("failed requests during %d swaps: %v", swaps, bad)
	}
	if served["a"] == 0 || served["b"] == 0 {
		t.Errorf("served %v, want both targets used", served)
	}
	if errs := p.Stats().Errors; len(errs) > 0 {
		t.Errorf("Stats().Errors = %v, want none", errs)
	}
	t.Logf("%d swaps, served %v", swaps, served)
}

// TestHTTPSwapKeepsInFlight swaps a host to a replacement target while a
// request is in flight on the old one, then stops the old target the way a
// replaced guest stops: the old request completes, new ones go to the new
// target, none fails.
func TestHTTPSwapKeepsInFlight(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	release := make(chan struct{})
	old := startBackend(t, "old", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "old")
	}))
	repl := startBackend(t, "new", nil)
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("app.test", old.addr()))
	c := proxyClient(t, p.HTTPAddr().String(), nil)

	// Warm a keep-alive connection to the old target first.
	if _, body, _ := do(t, c, "GET", "app.test", "/", nil); body != "old" {
		t.Fatalf("before the swap got %q, want old", body)
	}
	slow := make(chan string, 1)
	go func() {
		status, body, _ := do(t, c, "GET", "app.test", "/slow", nil)
		slow <- fmt.Sprintf("%d %s", status, body)
	}()
	<-started
	mustSetRoutes(t, p, httpRoutes("app.test", repl.addr()))
	for range 5 {
		if status, body, _ := do(t, c, "GET", "app.test", "/", nil); status != 200 || body != "new" {
			t.Errorf("after the swap = %d %q, want 200 new", status, body)
		}
	}
	stopped := make(chan struct{})
	go func() { old.Close(); close(stopped) }() // waits for the slow request
	time.Sleep(20 * time.Millisecond)
	close(release)
	if got := <-slow; got != "200 old" {
		t.Errorf("request in flight during the swap = %q, want \"200 old\"", got)
	}
	<-stopped
	for range 5 {
		if status, body, _ := do(t, c, "GET", "app.test", "/", nil); status != 200 || body != "new" {
			t.Errorf("after the old target stopped = %d %q, want 200 new", status, body)
		}
	}
}

func TestHTTPRequestWithoutHost(t *testing.T) {
	t.Parallel()
	p := startProxy(t, Config{})
	conn, err := net.Dial("tcp", p.HTTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET / HTTP/1.0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 404 || string(body) != "no route for host (none)\n" {
		t.Errorf("HTTP/1.0 request without Host = %d %q, want 404 no route", resp.StatusCode, body)
	}
}

// TestHTTPInFlightDrains: a request started on a target keeps counting
// against it after the route moved away, until it ends; that is how a
// deploy knows when the old process may stop.
func TestHTTPInFlightDrains(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{})
	old := startBackend(t, "old", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "old")
	}))
	next := startBackend(t, "new", nil)
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, httpRoutes("app.test", old.addr()))
	c := proxyClient(t, p.HTTPAddr().String(), nil)
	got := make(chan string, 1)
	go func() {
		_, body, _ := do(t, c, "GET", "app.test", "/", nil)
		got <- body
	}()
	<-entered
	mustSetRoutes(t, p, httpRoutes("app.test", next.addr()))
	if n := p.InFlight(old.addr()); n != 1 {
		t.Fatalf("InFlight(old) = %d while a request runs there, want 1", n)
	}
	if _, body, _ := do(t, c, "GET", "app.test", "/", nil); body != "new" {
		t.Fatalf("a request after the move went to %q", body)
	}
	close(release)
	if body := <-got; body != "old" {
		t.Fatalf("the request in flight got %q, want old's answer", body)
	}
	if n := p.InFlight(old.addr()); n != 0 {
		t.Fatalf("InFlight(old) = %d after the request ended", n)
	}
	if n := p.InFlight(next.addr()); n != 0 {
		t.Fatalf("InFlight(new) = %d when idle", n)
	}
}
