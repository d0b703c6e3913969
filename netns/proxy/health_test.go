package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// TestUnhealthyTargetOutOfRotation: requests are spread over a route's
// targets; one whose guest stops is out of rotation within a second (a
// POST, which is never sent twice, then never meets it) and back once it
// answers again; probers end with the routes.
func TestUnhealthyTargetOutOfRotation(t *testing.T) {
	t.Parallel()
	backends := []*backend{startBackend(t, "a", nil), startBackend(t, "b", nil), startBackend(t, "c", nil)}
	var targets []string
	for _, b := range backends {
		targets = append(targets, b.addr())
	}
	p := startProxy(t, Config{})
	mustSetRoutes(t, p, Routes{HTTP: map[string]HTTPRoute{"web.test": {Targets: targets}}})
	c := proxyClient(t, p.HTTPAddr().String(), nil)
	count := func(n int, method string) (map[string]int, int) {
		seen, failed := map[string]int{}, 0
		for range n {
			code, body, _ := do(t, c, method, "web.test", "/", strings.NewReader("x"))
			if code != 200 {
				failed++
				continue
			}
			seen[body]++
		}
		return seen, failed
	}
	if seen, failed := count(30, "POST"); failed != 0 || seen["a"] != 10 || seen["b"] != 10 || seen["c"] != 10 {
		t.Errorf("30 requests over 3 targets = %v, %d failed; want 10 each", seen, failed)
	}

	// b's guest stops: its port refuses.
	addrB := backends[1].addr()
	backends[1].Close()
	start := time.Now()
	waitFor(t, "b out of rotation", func() bool { return slices.Contains(p.TargetsDown(), addrB) })
	if took := time.Since(start); took > testrun.D(1500*time.Millisecond) {
		t.Errorf("b out of rotation after %v, want about a second at most", took)
	}
	if seen, failed := count(30, "POST"); failed != 0 || seen["b"] != 0 || seen["a"]+seen["c"] != 30 {
		t.Errorf("with b out: %v, %d failed; want a and c only, no failure", seen, failed)
	}

	// b back on its address.
	ln, err := net.Listen("tcp", addrB)
	if err != nil {
		t.Skipf("b's port was taken meanwhile: %v", err)
	}
	back := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "b") })}}
	back.Start()
	defer back.Close()
	waitFor(t, "b back in rotation", func() bool { return !slices.Contains(p.TargetsDown(), addrB) })
	if seen, failed := count(30, "GET"); failed != 0 || seen["b"] == 0 {
		t.Errorf("with b back: %v, %d failed; want b served again", seen, failed)
	}

	// One target left: nothing to choose, nothing probed.
	mustSetRoutes(t, p, Routes{HTTP: map[string]HTTPRoute{"web.test": {Targets: targets[:1]}}})
	p.health.mu.Lock()
	probers := len(p.health.by)
	p.health.mu.Unlock()
	if probers != 0 {
		t.Errorf("%d probers left after the routes dropped their targets", probers)
	}
}
