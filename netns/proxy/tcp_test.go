package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"corpus/internal/testrun"
)

func TestTCPEcho(t *testing.T) {
	t.Parallel()
	echo := startTCPEcho(t, "")
	p := startProxy(t, Config{})
	port := testrun.FreePort(t)
	mustSetRoutes(t, p, Routes{TCP: map[int]TCPRoute{port: {Target: echo}}})

	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(testrun.D(10 * time.Second)))
	payload := bytes.Repeat([]byte("tcp through the proxy\n"), 1<<16) // ~1.4 MiB
	go func() {
		c.Write(payload)
		c.(*net.TCPConn).CloseWrite() // the half-close must reach the target
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("echo = %d bytes, want the %d bytes sent", len(got), len(payload))
	}
	waitFor(t, "the connection to be counted closed", func() bool { return p.Stats().TCPActive == 0 })
	if s := p.Stats(); s.TCPConns != 1 || !slices.Equal(s.TCPPorts, []int{port}) {
		t.Errorf("Stats() tcp conns %d ports %v, want 1 and [%d]", s.TCPConns, s.TCPPorts, port)
	}
}

func TestTCPRouteChange(t *testing.T) {
	t.Parallel()
	a := startTCPEcho(t, "a: ")
	b := startTCPEcho(t, "b: ")
	p := startProxy(t, Config{})
	port := testrun.FreePort(t)
	mustSetRoutes(t, p, Routes{TCP: map[int]TCPRoute{port: {Target: a}}})

	old := dialLine(t, port)
	if got := old.roundTrip(t, "one"); got != "a: one" {
		t.Fatalf("before the change = %q, want from a", got)
	}
	mustSetRoutes(t, p, Routes{TCP: map[int]TCPRoute{port: {Target: b}}})
	if got := dialLine(t, port).roundTrip(t, "two"); got != "b: two" {
		t.Errorf("new connection after the change = %q, want from b", got)
	}
	if got := old.roundTrip(t, "three"); got != "a: three" {
		t.Errorf("old connection after the change = %q, want still from a", got)
	}
}

func TestTCPRouteRemoval(t *testing.T) {
	t.Parallel()
	a := startTCPEcho(t, "a: ")
	p := startProxy(t, Config{})
	port, other := testrun.FreePort(t), testrun.FreePort(t)
	mustSetRoutes(t, p, Routes{TCP: map[int]TCPRoute{port: {Target: a}, other: {Target: a}}})
	old := dialLine(t, port)
	if got := old.roundTrip(t, "one"); got != "a: one" {
		t.Fatalf("before removal = %q, want from a", got)
	}

	mustSetRoutes(t, p, Routes{TCP: map[int]TCPRoute{other: {Target: a}}})
	_, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if !isRefused(err) {
		t.Errorf("dialing a removed route = %v, want connection refused", err)
	}
	if got := old.roundTrip(t, "two"); got != "a: two" {
		t.Errorf("connection of the removed route = %q, want it still served", got)
	}
	if got := p.Stats().TCPPorts; !slices.Equal(got, []int{other}) {
		t.Errorf("Stats().TCPPorts = %v, want [%d]", got, other)
	}

	// Put back: the port listens again.
	mustSetRoutes(t, p, Routes{TCP: map[int]TCPRoute{port: {Target: a}}})
	if got := dialLine(t, port).roundTrip(t, "three"); got != "a: three" {
		t.Errorf("route put back = %q, want from a", got)
	}
}

func TestTCPDeadTarget(t *testing.T) {
	t.Parallel()
	p := startProxy(t, Config{})
	port := testrun.FreePort(t)
	mustSetRoutes(t, p, Routes{TCP: map[int]TCPRoute{port: {Target: closedAddr(t)}}})
	c := dialLine(t, port)
	c.SetDeadline(time.Now().Add(testrun.D(5 * time.Second)))
	if _, err := c.r.ReadByte(); err != io.EOF {
		t.Errorf("reading from a route with a dead target = %v, want EOF", err)
	}
	if got := p.Stats().TCPDialErrors; got != 1 {
		t.Errorf("Stats().TCPDialErrors = %d, want 1", got)
	}
}

func TestTCPListenErrorKeepsTheRest(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	a := startTCPEcho(t, "a: ")
	web := startBackend(t, "web", nil)
	p := startProxy(t, Config{})
	good := testrun.FreePort(t)

	r := Routes{
		HTTP: map[string]HTTPRoute{"web.test": {Targets: []string{web.addr()}}},
		TCP:  map[int]TCPRoute{takenPort: {Target: a}, good: {Target: a}},
	}
	err = p.SetRoutes(r)
	if !errors.Is(err, ErrListen) {
		t.Fatalf("SetRoutes with a taken port = %v, want ErrListen", err)
	}
	if got := dialLine(t, good).roundTrip(t, "x"); got != "a: x" {
		t.Errorf("other tcp route = %q, want served", got)
	}
	c := proxyClient(t, p.HTTPAddr().String(), nil)
	if status, body, _ := do(t, c, "GET", "web.test", "/", nil); status != 200 || body != "web" {
		t.Errorf("http route set with the failing port = %d %q, want 200 web", status, body)
	}

	// Level-based: once the port is free, the next SetRoutes opens it.
	taken.Close()
	if err := p.SetRoutes(r); err != nil {
		t.Fatalf("SetRoutes after the port was freed = %v, want nil", err)
	}
	if got := dialLine(t, takenPort).roundTrip(t, "y"); got != "a: y" {
		t.Errorf("freed port = %q, want served", got)
	}
}
