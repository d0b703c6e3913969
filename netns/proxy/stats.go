package proxy

import (
	"maps"
	"slices"
	"sync/atomic"
)

// Stats is a snapshot of the proxy's counters. Counters only grow over the
// life of a Proxy; the gauges (InFlight, Conns, TCPActive) go up and down.
// The maps and slices belong to the caller.
type Stats struct {
	// Requests counts HTTP and HTTPS requests received, routed or not.
	Requests uint64 `json:"requests"`
	// InFlight is the number of requests being served now.
	InFlight int64 `json:"in_flight"`
	// Conns is the number of open HTTP and HTTPS client connections, not
	// counting connections upgraded to another protocol (websockets).
	Conns int64 `json:"conns"`
	// Responses counts the responses targets sent, by status code.
	Responses map[int]uint64 `json:"responses"`
	// Errors counts the responses the proxy made itself, by status code:
	// 404 (no route for the host), 502 (target unreachable or broke the
	// exchange), 504 (target timed out), 499 (the client went away before
	// the target answered; nothing is sent).
	Errors map[int]uint64 `json:"errors"`
	// TCPConns counts TCP connections accepted on TCP route listeners.
	TCPConns uint64 `json:"tcp_conns"`
	// TCPActive is the number of TCP connections open now.
	TCPActive int64 `json:"tcp_active"`
	// TCPDialErrors counts TCP connections dropped because their target
	// could not be connected to.
	TCPDialErrors uint64 `json:"tcp_dial_errors"`
	// TCPPorts lists the TCP route ports listening now, sorted.
	TCPPorts []int `json:"tcp_ports"`
}

// statusClientGone is recorded (never sent) when the client cancels a request
// before the target answers, as nginx logs it.
const statusClientGone = 499

// counters are the live, lock-free counters behind Stats.
type counters struct {
	requests      atomic.Uint64
	inFlight      atomic.Int64
	conns         atomic.Int64
	responses     codeCounts
	errors        codeCounts
	tcpConns      atomic.Uint64
	tcpActive     atomic.Int64
	tcpDialErrors atomic.Uint64
	// handovers counts the client connections the lean HTTP/1.1 path left
	// to net/http.
	handovers atomic.Uint64
}

// codeCounts counts HTTP status codes 0-999 without a lock.
type codeCounts [1000]atomic.Uint64

func (c *codeCounts) add(code int) {
	if code < 0 || code >= len(c) {
		code = 0
	}
	c[code].Add(1)
}

func (c *codeCounts) snapshot() map[int]uint64 {
	m := map[int]uint64{}
	for code := range c {
		if n := c[code].Load(); n > 0 {
			m[code] = n
		}
	}
	return m
}

// Stats returns a snapshot of the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	ports := slices.Sorted(maps.Keys(p.tcpListeners))
	p.mu.Unlock()
	c := &p.counters
	return Stats{
		Requests:      c.requests.Load(),
		InFlight:      c.inFlight.Load(),
		Conns:         c.conns.Load(),
		Responses:     c.responses.snapshot(),
		Errors:        c.errors.snapshot(),
		TCPConns:      c.tcpConns.Load(),
		TCPActive:     c.tcpActive.Load(),
		TCPDialErrors: c.tcpDialErrors.Load(),
		TCPPorts:      ports,
	}
}
