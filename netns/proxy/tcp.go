package proxy

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"corpus/internal/tcprelay"
)

// syncTCPListeners opens a listener for every route port without one and
// closes those of ports no longer routed; their accepted connections keep
// running. A port whose route only changed target keeps its listener: the
// next connection reads the new target from the table. Callers hold p.mu.
func (p *Proxy) syncTCPListeners(routes map[int]TCPRoute) error {
	for port, ln := range p.tcpListeners {
		if _, ok := routes[port]; !ok {
			ln.Close()
			delete(p.tcpListeners, port)
			p.log.Info("tcp listener closed", "port", port)
		}
	}
	var errs []error
	for _, port := range slices.Sorted(maps.Keys(routes)) {
		if _, ok := p.tcpListeners[port]; ok {
			continue
		}
		addr := net.JoinHostPort(p.cfg.TCPHost, strconv.Itoa(port))
		ln, err := p.listen("tcp:"+strconv.Itoa(port), addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("tcp route %d: %w: %w", port, ErrListen, err))
			continue
		}
		p.tcpListeners[port] = ln
		p.tcpWG.Add(1)
		go p.acceptTCP(port, ln)
		p.log.Info("tcp listener opened", "port", port, "addr", ln.Addr().String())
	}
	return errors.Join(errs...)
}

// acceptTCP accepts on one route port until its listener is closed.
func (p *Proxy) acceptTCP(port int, ln net.Listener) {
	defer p.tcpWG.Done()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off, as
			// net/http does, instead of spinning.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			p.log.Warn("tcp accept failed", "port", port, "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-p.done:
				return
			}
			continue
		}
		delay = 0
		if !p.trackTCP(c) {
			c.Close()
			return
		}
		p.tcpWG.Add(1)
		go p.serveTCP(port, c)
	}
}

// trackTCP records c so a forced shutdown can close it; false once the
// proxy is closed.
func (p *Proxy) trackTCP(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.tcpConns[c] = struct{}{}
	return true
}

func (p *Proxy) untrackTCP(c net.Conn) {
	p.mu.Lock()
	delete(p.tcpConns, c)
	p.mu.Unlock()
	c.Close()
}

// serveTCP forwards one client connection to the target its port routes to
// at this moment, until both directions end.
func (p *Proxy) serveTCP(port int, c net.Conn) {
	defer p.tcpWG.Done()
	defer p.untrackTCP(c)
	p.counters.tcpConns.Add(1)
	p.counters.tcpActive.Add(1)
	defer p.counters.tcpActive.Add(-1)

	target, ok := p.table.Load().tcp[port]
	if !ok {
		return // the route went away between accept and now
	}
	d := net.Dialer{Timeout: p.cfg.DialTimeout}
	up, err := d.DialContext(p.base, "tcp", target)
	if err != nil {
		p.counters.tcpDialErrors.Add(1)
		p.log.Warn("tcp target unreachable", "port", port, "target", target, "err", err)
		return
	}
	if !p.trackTCP(up) {
		up.Close()
		return
	}
	defer p.untrackTCP(up)

	var wg sync.WaitGroup
	wg.Go(func() { tcprelay.CopyHalf(up, c) })
	tcprelay.CopyHalf(c, up)
	wg.Wait()
}
