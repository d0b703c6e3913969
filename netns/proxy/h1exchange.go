package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"corpus/netns/proxy/h1"
)

// exchange sends the request to a target of rt and forwards its answer. It
// reports whether the connection goes on with another request.
func (cc *h1Conn) exchange(rt *httpRoute) bool {
	p, req := cc.p, &cc.req
	p.counters.requests.Add(1)
	p.counters.inFlight.Add(1)
	if rt.flight != nil {
		rt.flight.Add(1)
	}
	cc.inFlight, cc.start = rt, time.Now()
	defer cc.landed()
	cc.unread = false

	// A body all at hand goes out with the head; any other streams.
	var inline []byte
	stream := req.Chunked
	if req.Length > 0 {
		if req.Length <= int64(cc.br.Buffered()) {
			inline, _ = cc.br.Peek(int(req.Length))
			// inline stays valid until cc.br is read again, after it
			// was sent (a request with a body is never sent twice).
			cc.br.Discard(int(req.Length))
		} else {
			stream = true
		}
	}

	uc, err := cc.connect(rt)
	if err != nil {
		cc.unread = stream
		return cc.fail(rt, err)
	}
	movedOn := false // sent to another target once already
	for {
		err = cc.send(uc, inline, stream)
		if err == nil {
			err = cc.readResponse(uc, stream)
		}
		if err == nil {
			break
		}
		if stream {
			if berr := cc.waitBody(uc, false); errors.Is(berr, errClientGone) {
				err = berr
			}
			cc.unread = !cc.bodyRead.Load()
		}
		// Nothing came back and the request may be sent again: a
		// kept-alive connection the target closed meanwhile is tried once
		// more on a new one, as the net/http Transport does; a new
		// connection the target dropped (an instance killed while the
		// request was in flight) sends it to another target, once, as
		// nginx's proxy_next_upstream does.
		fresh := !uc.reused
		if stream || !req.Retryable() || len(cc.rhead) > 0 || isTimeout(err) || errors.Is(err, errClientGone) ||
			(fresh && (movedOn || len(rt.targets) < 2)) {
			uc.close()
			return cc.fail(rt, err)
		}
		pl := uc.pool
		uc.close()
		if fresh {
			if i := slices.Index(rt.pools, pl); i >= 0 {
				rt.markDown(i)
			}
			movedOn = true
			if uc, err = cc.connect(rt); err != nil {
				return cc.fail(rt, err)
			}
			continue
		}
		pl.closeIdle(time.Now().Add(time.Hour)) // its fellows are likely stale too
		uc, err = p.upstreams.dial(p.base, pl)
		if err != nil && isDialError(err) && len(rt.targets) > 1 {
			// The target went away (a killed instance): the others.
			if i := slices.Index(rt.pools, pl); i >= 0 {
				rt.markDown(i)
			}
			uc, err = cc.connect(rt)
		}
		if err != nil {
			return cc.fail(rt, err)
		}
	}
	return cc.forward(rt, uc, stream)
}

// connect returns a connection to the route's next target, moving on to the
// other targets when one cannot be connected to and the request may be sent
// again (as failoverTransport does).
func (cc *h1Conn) connect(rt *httpRoute) (*upstreamConn, error) {
	p := cc.p
	retry := cc.req.Retryable()
	first := rt.pickIndex()
	uc, err := p.upstreams.connect(p.base, rt.pools[first], !retry)
	last := first
	for i := 1; err != nil && isDialError(err) && retry && i < len(rt.targets) && p.base.Err() == nil; i++ {
		rt.markDown(last)
		next := (first + i) % len(rt.targets)
		p.log.Debug("target unreachable, trying the next", "host", rt.host, "target", rt.targets[last], "next", rt.targets[next], "err", err)
		uc, err = p.upstreams.connect(p.base, rt.pools[next], !retry)
		last = next
	}
	if err != nil && isDialError(err) {
		rt.markDown(last)
	}
	return uc, err
}

// send writes the request head (and an inline body) to the target; a
// streamed body goes on from a goroutine of its own.
func (cc *h1Conn) send(uc *upstreamConn, inline []byte, stream bool) error {
	uc.bw.Write(cc.req.Out)
	cc.scratch = cc.appendForwarded(cc.scratch[:0])
	uc.bw.Write(cc.scratch)
	uc.bw.Write(inline)
	if !stream {
		return uc.bw.Flush()
	}
	if cc.bodyDone == nil {
		cc.bodyDone = make(chan error, 1)
	}
	cc.bodyRead.Store(false)
	cc.c.SetReadDeadline(time.Time{})
	// The wait for the answer's head is bounded from the end of the body
	// on (as the net/http Transport bounds it): sendBody sets it.
	uc.c.SetReadDeadline(time.Time{})
	go func() { cc.bodyDone <- cc.sendBody(uc) }()
	return nil
}

// sendBody streams the request body to the target. When reading it from
// the client fails, the exchange is cut (the target's connection closed).
func (cc *h1Conn) sendBody(uc *upstreamConn) error {
	bc := bodyCopy{src: cc.br, srcConn: cc.c, dst: uc.bw, dstConn: uc.c}
	var err error
	if cc.req.Chunked {
		err = bc.chunked()
	} else {
		err = bc.copyN(cc.req.Length)
	}
	if err == nil {
		cc.bodyRead.Store(true)
		if err = uc.bw.Flush(); err == nil {
			uc.c.SetReadDeadline(time.Now().Add(cc.p.cfg.ResponseHeaderTimeout))
		}
		return err
	}
	if bc.srcFailed {
		uc.c.Close()
		return errClientGone
	}
	return err
}

// waitBody waits for the body goroutine and returns its error. A body read
// to its end only has its last write to finish; any other is cut short
// (errBodyCut when the goroutine had no error of its own).
func (cc *h1Conn) waitBody(uc *upstreamConn, readAll bool) error {
	select {
	case err := <-cc.bodyDone:
		return bodyResult(err, readAll)
	default:
	}
	if readAll {
		uc.c.SetWriteDeadline(time.Now().Add(time.Second))
	} else {
		uc.c.SetWriteDeadline(aLongTimeAgo)
		cc.c.SetReadDeadline(aLongTimeAgo)
	}
	err := <-cc.bodyDone
	uc.c.SetWriteDeadline(time.Time{})
	return bodyResult(err, readAll)
}

func bodyResult(err error, readAll bool) error {
	if err == nil && !readAll {
		return errBodyCut
	}
	return err
}

// appendForwarded appends X-Forwarded-For, -Host and -Proto and the end of
// the head, as setForwarded sets them.
func (cc *h1Conn) appendForwarded(b []byte) []byte {
	req := &cc.req
	b = append(b, "X-Forwarded-For: "...)
	if cc.trusted {
		for _, v := range req.XFF {
			b = append(append(b, v...), ", "...)
		}
	}
	b = append(b, cc.clientIP...)
	b = append(b, "\r\nX-Forwarded-Host: "...)
	if cc.trusted && len(req.XFH) > 0 {
		b = append(b, req.XFH...)
	} else {
		b = append(b, req.Host...)
	}
	b = append(b, "\r\nX-Forwarded-Proto: "...)
	switch {
	case cc.trusted && len(req.XFP) > 0:
		b = append(b, req.XFP...)
	case cc.tls != nil:
		b = append(b, "https"...)
	default:
		b = append(b, "http"...)
	}
	return append(b, "\r\n\r\n"...)
}

// readResponse reads the target's final response head into cc.rhead and
// cc.resp, forwarding informational (1xx) answers on the way.
//
// A target slower than watchAfter gets the client connection watched, so
// that a client gone meanwhile (or the proxy closing it) cuts the exchange,
// as net/http cancels a request whose client went away (it watches every
// request; the lean path only slow ones). With a streamed body the wait is
// bounded from the end of the body on (sendBody sets the deadline), and
// the body's goroutine watches the client while it reads from it.
func (cc *h1Conn) readResponse(uc *upstreamConn, stream bool) error {
	now := time.Now()
	deadline := now.Add(cc.p.cfg.ResponseHeaderTimeout)
	watch := !stream && cc.p.cfg.ResponseHeaderTimeout > watchAfter
	switch {
	case stream: // set by sendBody
	case watch:
		uc.c.SetReadDeadline(now.Add(watchAfter))
	default:
		uc.c.SetReadDeadline(deadline)
	}
	var watching chan struct{}
	defer func() {
		if watching != nil {
			cc.unwatch(watching)
		}
	}()
	cc.rhead = cc.rhead[:0]
	for informational := 0; ; informational++ {
		start := len(cc.rhead)
		for {
			line, err := uc.br.ReadSlice('\n')
			cc.rhead = append(cc.rhead, line...)
			if len(cc.rhead) > maxResponseHead {
				return errHeadTooLarge
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil && watch && watching == nil && isTimeout(err) && time.Now().Before(deadline) {
				// The deadline first: a client already gone cuts it
				// short from the watch, which must not be undone.
				uc.c.SetReadDeadline(deadline)
				watching = cc.watch(uc)
				continue
			}
			if err != nil {
				if cc.clientGone.Load() {
					return errClientGone
				}
				return err
			}
			if len(line) == 1 || len(line) == 2 && line[0] == '\r' {
				break
			}
		}
		if !h1.ParseResponse(cc.rhead[start:], &cc.resp) {
			return errResponseHead
		}
		switch {
		case cc.resp.Status == http.StatusSwitchingProtocols:
			return errUpgrade
		case cc.resp.Status >= 200:
			cc.rhead = cc.rhead[start:]
			return nil
		case informational >= 5:
			return errResponseHead
		}
		cc.writeHead(cc.rhead[start:], false)
		if err := cc.bw.Flush(); err != nil {
			return err
		}
	}
}

// watchAfter is how long a target may take to answer before the client
// connection is watched.
const watchAfter = time.Second

// watch watches the client connection until unwatch: when it ends, the
// wait for the target's answer is cut short.
func (cc *h1Conn) watch(uc *upstreamConn) chan struct{} {
	done := make(chan struct{})
	cc.clientGone.Store(false)
	cc.c.SetReadDeadline(time.Time{})
	go func() {
		defer close(done)
		if _, err := cc.br.Peek(1); err != nil && !isTimeout(err) {
			cc.clientGone.Store(true)
			uc.c.SetReadDeadline(aLongTimeAgo)
		}
	}()
	return done
}

func (cc *h1Conn) unwatch(done chan struct{}) {
	cc.c.SetReadDeadline(aLongTimeAgo)
	<-done
}

// forward sends the target's answer (its head read) on to the client, and
// puts the target's connection back when the exchange ended cleanly.
func (cc *h1Conn) forward(rt *httpRoute, uc *upstreamConn, stream bool) bool {
	p, req, resp := cc.p, &cc.req, &cc.resp
	p.counters.responses.add(resp.Status)
	rt.metrics.answered(resp.Status)
	noBody := resp.NoBody(req.IsHead())
	readAll := !stream || cc.bodyRead.Load()
	toEOF := !noBody && !resp.Chunked && resp.Length < 0
	closeAfter := req.Close || p.draining.Load() || !readAll || toEOF
	cc.writeHead(cc.rhead, closeAfter)

	var err error
	if !noBody {
		if !(resp.Length >= 0 && resp.Length <= int64(uc.br.Buffered())) {
			uc.c.SetReadDeadline(time.Time{})
		}
		bc := bodyCopy{src: uc.br, srcConn: uc.c, dst: cc.bw, dstConn: cc.c}
		switch {
		case resp.Chunked:
			err = bc.chunked()
		case resp.Length >= 0:
			err = bc.copyN(resp.Length)
		default:
			err = bc.toEOF()
		}
	}
	if err == nil {
		cc.landed()
		err = cc.bw.Flush()
	}
	reuse := err == nil && !resp.Close && !toEOF && !p.draining.Load()
	if stream && cc.waitBody(uc, readAll) != nil {
		reuse = false
	}
	if reuse {
		uc.pool.put(uc, time.Now())
	} else {
		uc.close()
	}
	if err != nil {
		p.log.Debug("answer cut short", "host", rt.host, "err", err)
	}
	cc.unread = !readAll
	return err == nil && !closeAfter
}

// writeHead writes a response head of the target to the client: the status
// line, the end-to-end headers, the framing, a Date if there was none (as
// a proxy must add) and Connection: close when the connection ends after
// it.
func (cc *h1Conn) writeHead(head []byte, closeAfter bool) {
	resp, bw := &cc.resp, cc.bw
	b := append(cc.scratch[:0], "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(resp.Status), 10)
	b = append(b, ' ')
	if len(resp.Reason) > 0 {
		b = append(b, resp.Reason...)
	} else {
		b = append(b, http.StatusText(resp.Status)...)
	}
	b = append(b, "\r\n"...)
	_, rest, _ := h1.CutLine(head)
	for {
		line, more, ok := h1.CutLine(rest)
		if !ok || len(line) == 0 {
			break
		}
		rest = more
		if resp.KeepHeader(line[:bytes.IndexByte(line, ':')]) {
			b = append(append(b, line...), "\r\n"...)
		}
	}
	if resp.Status >= 200 {
		switch {
		case resp.Chunked:
			b = append(b, "Transfer-Encoding: chunked\r\n"...)
		case resp.Length >= 0:
			b = append(b, "Content-Length: "...)
			b = append(strconv.AppendInt(b, resp.Length, 10), "\r\n"...)
		}
		if !resp.HasDate {
			b = append(append(append(b, "Date: "...), httpDate(time.Now())...), "\r\n"...)
		}
		if cc.tls != nil && cc.inFlight != nil && cc.inFlight.hsts {
			b = append(b, "Strict-Transport-Security: "+hstsValue+"\r\n"...)
		}
		if closeAfter {
			b = append(b, "Connection: close\r\n"...)
		}
	}
	b = append(b, "\r\n"...)
	bw.Write(b)
	cc.scratch = b
}

// fail answers a request its target failed, as proxyError does.
func (cc *h1Conn) fail(rt *httpRoute, err error) bool {
	p := cc.p
	if errors.Is(err, errClientGone) {
		p.counters.errors.add(statusClientGone)
		rt.metrics.answered(statusClientGone)
		p.log.Debug("request abandoned", "host", rt.host, "err", err)
		return false
	}
	code, msg, reason := upstreamFailure(rt.host, err)
	p.counters.errors.add(code)
	rt.metrics.answered(code)
	p.metrics.upstreamErrors.WithLabelValues(rt.host, reason).Inc()
	p.log.Warn("proxy error", "host", rt.host, "status", code, "err", err)
	closeAfter := cc.req.Close || p.draining.Load() || cc.unread
	b := append(cc.scratch[:0], "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(append(append(b, ' '), http.StatusText(code)...), "\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nDate: "...)
	b = append(append(b, httpDate(time.Now())...), "\r\nContent-Length: "...)
	b = append(strconv.AppendInt(b, int64(len(msg)+1), 10), "\r\n"...)
	if closeAfter {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(append(append(b, "\r\n"...), msg...), '\n')
	cc.scratch = b
	cc.bw.Write(b)
	cc.landed()
	return cc.bw.Flush() == nil && !closeAfter
}

// dateCache holds the Date header value of the current second.
var dateCache atomic.Pointer[dateValue]

type dateValue struct {
	sec int64
	b   []byte
}

// httpDate is now as an HTTP Date header value; the caller must not change
// it.
func httpDate(now time.Time) []byte {
	sec := now.Unix()
	if d := dateCache.Load(); d != nil && d.sec == sec {
		return d.b
	}
	d := &dateValue{sec: sec, b: now.UTC().AppendFormat(nil, http.TimeFormat)}
	dateCache.Store(d)
	return d.b
}
