package proxy

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Health of the targets of routes with several: a target out of rotation
// gets no new request while another is in. Each such target is probed by
// a connect every healthEvery; healthFall failed probes in a row take it
// out (within a second), healthRise good ones bring it back. A request
// that cannot connect to it takes it out at once (and moves on to the
// next target when it may). When every target of a route is out, they
// are all tried in turn, as without health. Routes with one target are
// not probed: there is nothing to choose.

const (
	healthEvery   = 400 * time.Millisecond
	healthTimeout = 300 * time.Millisecond
	healthFall    = 2
	healthRise    = 2
)

// targetHealth is one target's state, shared by every route to it.
type targetHealth struct {
	addr string
	down atomic.Bool
	refs int // under healthSet.mu
	stop chan struct{}
}

// healthSet keeps one prober per target in use by a route with several
// targets.
type healthSet struct {
	base context.Context
	mu   sync.Mutex
	by   map[string]*targetHealth
}

func newHealthSet(base context.Context) *healthSet {
	return &healthSet{base: base, by: map[string]*targetHealth{}}
}

// acquire returns the health of addr, starting its prober if new.
func (s *healthSet) acquire(addr string) *targetHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.by[addr]
	if h == nil {
		h = &targetHealth{addr: addr, stop: make(chan struct{})}
		s.by[addr] = h
		go h.probe(s.base)
	}
	h.refs++
	return h
}

// release drops a reference; the last stops the prober.
func (s *healthSet) release(h *targetHealth) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.refs--; h.refs == 0 {
		delete(s.by, h.addr)
		close(h.stop)
	}
}

// probe connects to the target every healthEvery until stopped.
func (h *targetHealth) probe(ctx context.Context) {
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	fails, oks := 0, 0
	d := net.Dialer{Timeout: healthTimeout}
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.stop:
			return
		case <-t.C:
		}
		c, err := d.DialContext(ctx, "tcp", h.addr)
		if err != nil {
			oks, fails = 0, fails+1
			if fails >= healthFall {
				h.down.Store(true)
			}
			continue
		}
		c.Close()
		fails, oks = 0, oks+1
		if oks >= healthRise {
			h.down.Store(false)
		}
	}
}

// markDown takes a target out of rotation after a request could not
// connect to it; its prober brings it back.
func (rt *httpRoute) markDown(i int) {
	if rt.health != nil {
		rt.health[i].down.Store(true)
	}
}

// indexOf is the index of target in rt.targets, -1 when absent.
func (rt *httpRoute) indexOf(target string) int {
	for i, t := range rt.targets {
		if t == target {
			return i
		}
	}
	return -1
}

// acquireHealth gives rt the health of its targets when it has several.
func (p *Proxy) acquireHealth(rt *httpRoute) {
	if len(rt.targets) < 2 {
		return
	}
	rt.health = make([]*targetHealth, len(rt.targets))
	for i, t := range rt.targets {
		rt.health[i] = p.health.acquire(t)
	}
}

// releaseHealth drops the health references of a table no longer in
// force.
func (p *Proxy) releaseHealth(t *table) {
	for _, rt := range t.http {
		for _, h := range rt.health {
			p.health.release(h)
		}
	}
}

// TargetsDown lists the targets out of rotation now.
func (p *Proxy) TargetsDown() []string {
	p.health.mu.Lock()
	defer p.health.mu.Unlock()
	var out []string
	for addr, h := range p.health.by {
		if h.down.Load() {
			out = append(out, addr)
		}
	}
	return out
}
