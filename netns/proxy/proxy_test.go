package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"testing"
	"time"

	"corpus/internal/testrun"
	"corpus/netns/listen"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero takes defaults", Config{}, true},
		{"defaults", DefaultConfig(), true},
		{"https serving route certificates only", Config{HTTPSAddr: ":443"}, true},
		{"certs without https", Config{Certs: []CertFiles{{CertFile: "c", KeyFile: "k"}}}, false},
		{"negative timeout", Config{DialTimeout: -time.Second}, false},
		{"negative header limit", Config{MaxHeaderBytes: -1}, false},
		{"invalid prefix", Config{TrustedProxies: []netip.Prefix{{}}}, false},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
		if tc.ok != (err == nil) {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig", tc.name, err)
		}
	}
}

func TestNewListenError(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, err = New(Config{HTTPAddr: taken.Addr().String()})
	if !errors.Is(err, ErrListen) {
		t.Errorf("New on a taken address = %v, want ErrListen", err)
	}
	// It says the address is in use, and who holds it: this process.
	var le *listen.Error
	if !errors.As(err, &le) || !le.InUse || le.Listener != "http" || le.Holder == nil || le.Holder.PID != os.Getpid() {
		t.Errorf("New on a taken address = %#v, want a listen.Error in use by pid %d", err, os.Getpid())
	}
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	release := make(chan struct{})
	be := startBackend(t, "slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		io.WriteString(w, "finished")
	}))
	p, err := New(Config{HTTPAddr: "127.0.0.1:0", TCPHost: "127.0.0.1", ShutdownTimeout: 5 * time.Second, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	echo := startTCPEcho(t, "e: ")
	port := testrun.FreePort(t)
	mustSetRoutes(t, p, Routes{
		HTTP: map[string]HTTPRoute{"app.test": {Targets: []string{be.addr()}}},
		TCP:  map[int]TCPRoute{port: {Target: echo}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	tcp := dialLine(t, port)
	if got := tcp.roundTrip(t, "hi"); got != "e: hi" {
		t.Fatalf("tcp before shutdown = %q", got)
	}
	c := proxyClient(t, p.HTTPAddr().String(), nil)
	result := make(chan string, 1)
	go func() {
		status, body, _ := do(t, c, "GET", "app.test", "/", nil)
		result <- http.StatusText(status) + " " + body
	}()
	<-started
	cancel()
	// Listeners are closed at once; what is in flight goes on.
	waitFor(t, "the HTTP listener to close", func() bool {
		c, err := net.DialTimeout("tcp", p.HTTPAddr().String(), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if got := tcp.roundTrip(t, "still"); got != "e: still" {
		t.Errorf("tcp during shutdown = %q, want served", got)
	}
	close(release)
	if got := <-result; got != "OK finished" {
		t.Errorf("request in flight at shutdown = %q, want OK finished", got)
	}
	tcp.Close() // the last connection ends: Run can return
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(testrun.D(10 * time.Second)):
		t.Fatal("Run did not return after the last connection ended")
	}
	if err := p.SetRoutes(Routes{}); !errors.Is(err, ErrClosed) {
		t.Errorf("SetRoutes after Run = %v, want ErrClosed", err)
	}
	if err := p.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Run again = %v, want ErrClosed", err)
	}
}

func TestShutdownTimeoutCutsLongConnections(t *testing.T) {
	t.Parallel()
	be := startBackend(t, "ws", http.HandlerFunc(wsEchoHandler))
	echo := startTCPEcho(t, "e: ")
	p, err := New(Config{HTTPAddr: "127.0.0.1:0", TCPHost: "127.0.0.1", ShutdownTimeout: 300 * time.Millisecond, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	port := testrun.FreePort(t)
	mustSetRoutes(t, p, Routes{
		HTTP: map[string]HTTPRoute{"ws.test": {Targets: []string{be.addr()}}},
		TCP:  map[int]TCPRoute{port: {Target: echo}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	tcp := dialLine(t, port)
	tcp.roundTrip(t, "hi")
	ws, err := net.Dial("tcp", p.HTTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	io.WriteString(ws, "GET / HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	ws.SetReadDeadline(time.Now().Add(testrun.D(5 * time.Second)))
	buf := make([]byte, 12)
	if _, err := io.ReadFull(ws, buf); err != nil || string(buf) != "HTTP/1.1 101" {
		t.Fatalf("upgrade answer = %q, %v", buf, err)
	}
	waitFor(t, "the upgraded request to be in flight", func() bool { return p.Stats().InFlight == 1 })

	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(testrun.D(10 * time.Second)):
		t.Fatal("Run did not return after its shutdown timeout")
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("Run returned after %v, want it to wait for the 300ms shutdown timeout", d)
	}
	ws.SetReadDeadline(time.Now().Add(testrun.D(5 * time.Second)))
	if _, err := io.ReadAll(ws); err != nil {
		t.Errorf("upgraded connection after the shutdown timeout: %v, want closed", err)
	}
	tcp.SetReadDeadline(time.Now().Add(testrun.D(5 * time.Second)))
	if _, err := io.ReadAll(tcp); err != nil {
		t.Errorf("tcp connection after the shutdown timeout: %v, want closed", err)
	}
}

func TestCloseAndMisuse(t *testing.T) {
	t.Parallel()
	p, err := New(Config{HTTPAddr: "127.0.0.1:0", Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	waitFor(t, "Run to start", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.running
	})
	if err := p.Run(ctx); !errors.Is(err, ErrRunning) {
		t.Errorf("second Run = %v, want ErrRunning", err)
	}
	p.Close()
	if err := <-done; err != nil {
		t.Errorf("Run after Close = %v, want nil", err)
	}
	if err := p.SetRoutes(Routes{}); !errors.Is(err, ErrClosed) {
		t.Errorf("SetRoutes after Close = %v, want ErrClosed", err)
	}
	p.Close() // twice is fine

	// A proxy that never runs releases its listener on Close.
	q, err := New(Config{HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := q.HTTPAddr().String()
	q.Close()
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("listener of a closed proxy still accepts")
	}
}
