package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"corpus/netns/proxy/h1"
)

// The lean HTTP/1.1 path serves the common case of both listeners itself:
// keep-alive HTTP/1.1 requests with a plain path, proxied to keep-alive
// connections of its own to the targets, one goroutine per client
// connection, no allocation per request. It hands a connection over to
// net/http's server (and httputil.ReverseProxy, handler.ServeHTTP) for good
// at its first request that is anything else: HTTP/1.0, upgrades
// (websockets), Expect, a header it does not fully understand, a host with
// no route (the 404), an ACME challenge; and HTTP/2 (ALPN h2) at the
// handshake. net/http then reads the request again from the bytes the lean
// path had read.
//
//	accept ─> [TLS handshake] ─> h2? ─────────────────────────> net/http
//	              │
//	              └─> read head ─> unusual? ─────────────────────> net/http
//	                     ^            │
//	                     │            └─> route ─> target ─> answer ─┐
//	                     └──────────────── keep-alive <──────────────┘

// acmeChallengePrefix is the path of ACME HTTP-01 challenges: requests under
// it always go to handler.ServeHTTP, so that a challenge answered there
// before routing is never proxied.
const acmeChallengePrefix = "/.well-known/acme-challenge/"

// maxResponseHead bounds a target's response head (as the net/http
// Transport's default does); a larger one gets the client a 502.
const maxResponseHead = 1 << 20

// States of a lean connection, for shutdown: idle connections (waiting for
// a request) are closed, active ones finish their exchange.
const (
	stateIdle int32 = iota
	stateActive
	stateClosed
)

var (
	errResponseHead = errors.New("malformed response head")
	errHeadTooLarge = errors.New("response head too large")
	errUpgrade      = errors.New("unrequested protocol switch")
	errClientGone   = errors.New("client gone while sending the body")
	errBodyCut      = errors.New("request body cut short")
	aLongTimeAgo    = time.Unix(1, 0)
)

// h1Server serves one listener: its connections on the lean path, the rest
// by srv, which serves handoff.
type h1Server struct {
	p       *Proxy
	ln      net.Listener
	tls     *tls.Config // nil: plain HTTP
	srv     *http.Server
	handoff *handoffListener

	mu    sync.Mutex
	conns map[*h1Conn]struct{}
}

func (p *Proxy) newH1Server(ln net.Listener, srv *http.Server, tlsConfig *tls.Config) *h1Server {
	return &h1Server{
		p: p, ln: ln, tls: tlsConfig, srv: srv,
		handoff: newHandoffListener(ln.Addr()),
		conns:   map[*h1Conn]struct{}{},
	}
}

// serve accepts connections until the listener closes; then it returns
// http.ErrServerClosed, or the listener's error if it failed otherwise.
func (s *h1Server) serve() error {
	var delay time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return http.ErrServerClosed
			}
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.p.log.Warn("accept failed, retrying", "err", err, "delay", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		cc := &h1Conn{s: s, p: s.p, raw: c, c: c, first: true}
		s.p.counters.conns.Add(1)
		s.mu.Lock()
		s.conns[cc] = struct{}{}
		s.mu.Unlock()
		go cc.serve()
	}
}

// closeConns closes the idle connections (all of them with all) and
// returns how many are left.
func (s *h1Server) closeConns(all bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for cc := range s.conns {
		if all || cc.state.CompareAndSwap(stateIdle, stateClosed) {
			cc.raw.Close()
		}
	}
	return len(s.conns)
}

// shutdown closes the idle connections until none is left (those serving
// a request close after their answer, the proxy draining), and every one
// left when ctx ends.
func (s *h1Server) shutdown(ctx context.Context) {
	for s.closeConns(false) > 0 {
		select {
		case <-ctx.Done():
			s.closeConns(true)
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// h1Conn is one client connection on the lean path.
type h1Conn struct {
	s     *h1Server
	p     *Proxy
	raw   net.Conn // as accepted
	c     net.Conn // raw, or the TLS connection over it
	tls   *tls.ConnectionState
	br    *bufio.Reader
	bw    *bufio.Writer
	state atomic.Int32
	first bool // no request read yet

	head    []byte // the request head read
	req     h1.Request
	rhead   []byte // the target's response head
	resp    h1.Response
	key     []byte // the route key of req
	lastKey string // the previous request's route key
	scratch []byte

	clientIP string
	trusted  bool

	// A request body that is not all at hand streams to the target from a
	// goroutine of its own while the answer streams back.
	bodyDone chan error
	bodyRead atomic.Bool // the body was read to its end
	// clientGone is set when the client connection ended while the
	// target was slow to answer.
	clientGone atomic.Bool
	unread     bool // a request body was left unread: linger at close

	inFlight *httpRoute // the route of the request in flight
	start    time.Time  // when it started
}

// landed ends the request in flight: it no longer counts as in flight
// (before the client has the end of its answer, as with net/http, so a
// client that saw its answer sees it counted out) and its duration is
// recorded.
func (cc *h1Conn) landed() {
	rt := cc.inFlight
	if rt == nil {
		return
	}
	cc.inFlight = nil
	cc.p.counters.inFlight.Add(-1)
	if rt.flight != nil {
		rt.flight.Add(-1)
	}
	rt.metrics.served(cc.start)
}

// untrack removes the connection from its server's count and set.
func (cc *h1Conn) untrack() {
	cc.s.mu.Lock()
	delete(cc.s.conns, cc)
	cc.s.mu.Unlock()
	cc.p.counters.conns.Add(-1)
}

func (cc *h1Conn) release() {
	putReader(cc.br)
	putWriter(cc.bw)
	cc.br, cc.bw = nil, nil
}

func (cc *h1Conn) serve() {
	p := cc.p
	if cc.s.tls != nil && !cc.handshake() {
		return
	}
	if host, _, err := net.SplitHostPort(cc.c.RemoteAddr().String()); err == nil {
		cc.clientIP = host
	} else {
		cc.clientIP = cc.c.RemoteAddr().String()
	}
	cc.trusted = p.trusts(cc.clientIP)
	cc.br, cc.bw = getReader(cc.c), getWriter(cc.c)
	for {
		ok, tooLarge := cc.readHead()
		if !ok {
			break
		}
		if tooLarge || !h1.ParseRequest(cc.head, &cc.req) {
			cc.handOver()
			return
		}
		rt := cc.route()
		if rt == nil {
			cc.handOver()
			return
		}
		ok = cc.exchange(rt)
		cc.trim()
		if !ok || !cc.state.CompareAndSwap(stateActive, stateIdle) {
			break
		}
	}
	cc.untrack()
	if cc.unread {
		cc.bw.Flush()
		if cw, ok := cc.c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		// As net/http does: let the client read the answer before the
		// close resets the connection over its unread upload.
		time.Sleep(500 * time.Millisecond)
	}
	cc.c.Close()
	cc.release()
}

// trim lets go of head buffers an unusually large head grew, so that an
// idle connection holds little.
func (cc *h1Conn) trim() {
	const keep = 16 << 10
	if cap(cc.head) > keep {
		cc.head = nil
	}
	if cap(cc.rhead) > keep {
		cc.rhead = nil
	}
	if cap(cc.scratch) > keep {
		cc.scratch = nil
	}
	if cap(cc.req.Out) > keep {
		cc.req.Out = nil
	}
}

// handshake runs the TLS handshake; an h2 connection goes to net/http
// right away. It reports whether the lean path serves the connection.
func (cc *h1Conn) handshake() bool {
	p := cc.p
	tc := tls.Server(cc.c, cc.s.tls)
	tc.SetDeadline(time.Now().Add(p.cfg.ReadHeaderTimeout))
	if err := tc.HandshakeContext(p.base); err != nil {
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		}
		p.log.Debug("TLS handshake failed", "remote", cc.c.RemoteAddr().String(), "err", err)
		cc.untrack()
		cc.c.Close()
		return false
	}
	tc.SetDeadline(time.Time{})
	cc.c = tc
	cs := tc.ConnectionState()
	cc.tls = &cs
	if cs.NegotiatedProtocol == acmeTLSProto {
		// A CA's tls-alpn-01 validation: the handshake was the answer.
		cc.untrack()
		tc.Close()
		return false
	}
	if cs.NegotiatedProtocol == "h2" {
		cc.untrack()
		p.counters.handovers.Add(1)
		if !cc.s.handoff.handOver(tc) {
			tc.Close()
		}
		return false
	}
	return true
}

func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// readHead reads the next request head into cc.head. ok is false when the
// connection is to be closed: it closed, timed out (idle, or its head was
// not read in time) or the proxy is shutting down. tooLarge means the head
// outgrew MaxHeaderBytes (net/http answers 431).
func (cc *h1Conn) readHead() (ok, tooLarge bool) {
	p := cc.p
	if cc.br.Buffered() == 0 {
		wait := p.cfg.IdleTimeout
		if cc.first {
			wait = p.cfg.ReadHeaderTimeout
		}
		cc.c.SetReadDeadline(time.Now().Add(wait))
		if _, err := cc.br.Peek(1); err != nil {
			return false, false
		}
	}
	if !cc.state.CompareAndSwap(stateIdle, stateActive) {
		return false, false
	}
	// The head is most often all here; else it must come in time.
	if !cc.first {
		if buf, _ := cc.br.Peek(cc.br.Buffered()); !bytes.Contains(buf, []byte("\r\n\r\n")) {
			cc.c.SetReadDeadline(time.Now().Add(p.cfg.ReadHeaderTimeout))
		}
	}
	cc.first = false
	cc.head = cc.head[:0]
	for {
		line, err := cc.br.ReadSlice('\n')
		cc.head = append(cc.head, line...)
		if len(cc.head) > p.cfg.MaxHeaderBytes {
			return true, true
		}
		switch {
		case err == bufio.ErrBufferFull:
		case err != nil:
			return false, false
		case len(line) == 1 || len(line) == 2 && line[0] == '\r':
			return true, false
		}
	}
}

// route finds the request's route; nil sends it to net/http: a host with
// no route (net/http answers 404), an ACME challenge, or plain HTTP to a
// route that redirects it to HTTPS.
func (cc *h1Conn) route() *httpRoute {
	if bytes.HasPrefix(cc.req.Path, []byte(acmeChallengePrefix)) {
		return nil
	}
	cc.key = h1.AppendHostKey(cc.key[:0], cc.req.Host)
	if string(cc.key) != cc.lastKey {
		cc.lastKey = string(cc.key)
	}
	t := cc.p.table.Load()
	rt := t.route(cc.lastKey)
	if rt != nil && rt.redirect && cc.tls == nil && t.tls.certs[cc.lastKey] != nil {
		return nil // net/http redirects it to HTTPS
	}
	return rt
}

// handOver gives the connection to net/http, with the bytes read of it.
func (cc *h1Conn) handOver() {
	rest, _ := cc.br.Peek(cc.br.Buffered())
	prefix := make([]byte, 0, len(cc.head)+len(rest))
	prefix = append(append(prefix, cc.head...), rest...)
	pc := &prefixConn{Conn: cc.c, prefix: prefix, tls: cc.tls}
	cc.c.SetReadDeadline(time.Time{})
	cc.untrack()
	cc.release()
	cc.p.counters.handovers.Add(1)
	if !cc.s.handoff.handOver(pc) {
		pc.Close()
	}
}
