package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// table is one immutable routing table. Requests and TCP connections load
// it once, when they start.
type table struct {
	routes Routes // the copy given to SetRoutes, never changed
	http   map[string]*httpRoute
	tcp    map[int]string // listen port -> target
	tls    *tlsTable
}

// httpRoute is the compiled form of one HTTPRoute. Only next changes.
type httpRoute struct {
	host    string
	targets []string
	pools   []*upstreamPool // the lean path's connections, by target
	next    atomic.Uint64   // round-robin cursor
	rp      *httputil.ReverseProxy
	// flight counts requests in flight to a route's one target.
	flight  *atomic.Int64
	metrics *routeMetrics
	// redirect and hsts are the route's HTTPS settings (see HTTPRoute).
	redirect, hsts bool
	// health is its targets' health (health.go), by index; nil with one.
	health []*targetHealth
}

// pick returns the target the next request starts with.
func (rt *httpRoute) pick() string { return rt.targets[rt.pickIndex()] }

// pickIndex is pick's index in targets.
func (rt *httpRoute) pickIndex() int {
	n := len(rt.targets)
	if n == 1 {
		return 0
	}
	start := int((rt.next.Add(1) - 1) % uint64(n))
	if rt.health == nil {
		return start
	}
	for i := range n { // the next in rotation (all out: start anyway)
		if j := (start + i) % n; !rt.health[j].down.Load() {
			return j
		}
	}
	return start
}

// route returns the route of a host key (a Host header or TLS server name
// made canonical by matchHost), nil when there is none. Every request, on
// the lean path as on net/http's, finds its route here.
func (t *table) route(key string) *httpRoute { return t.http[key] }

// compile builds the table for r; r must be valid and owned by the table.
func (p *Proxy) compile(r Routes, tt *tlsTable) *table {
	t := &table{
		routes: r,
		tls:    tt,
		http:   make(map[string]*httpRoute, len(r.HTTP)),
		tcp:    make(map[int]string, len(r.TCP)),
	}
	for host, hr := range r.HTTP {
		rt := &httpRoute{host: host, targets: hr.Targets, metrics: p.metrics.route(host), redirect: hr.RedirectHTTPS, hsts: hr.HSTS}
		if len(rt.targets) == 1 {
			rt.flight = p.flight(rt.targets[0])
		}
		for _, target := range rt.targets {
			rt.pools = append(rt.pools, p.upstreams.pool(target))
		}
		rt.rp = p.reverseProxy(rt)
		p.acquireHealth(rt)
		t.http[host] = rt
	}
	for port, tr := range r.TCP {
		t.tcp[port] = tr.Target
	}
	return t
}

// handler serves the HTTP and HTTPS listeners.
type handler struct{ p *Proxy }

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := h.p
	p.counters.requests.Add(1)
	p.counters.inFlight.Add(1)
	defer p.counters.inFlight.Add(-1)

	host := matchHost(r.Host)
	t := p.table.Load()
	if p.answerChallenge(w, r, t) {
		return
	}
	rt := t.route(host)
	if rt == nil {
		p.counters.errors.add(http.StatusNotFound)
		p.metrics.answered(noRoute, http.StatusNotFound)
		if host == "" {
			host = "(none)"
		}
		http.Error(w, "no route for host "+host, http.StatusNotFound)
		return
	}
	if r.TLS == nil {
		// An HTTPS connection the lean path handed over.
		if cs, ok := r.Context().Value(tlsStateKey{}).(*tls.ConnectionState); ok {
			r2 := *r
			r2.TLS = cs
			r = &r2
		}
	}
	if p.secure(w, r, t, host) {
		return
	}
	if r.ContentLength != 0 && r.ProtoMajor == 1 {
		w, r = fullDuplex(w, r)
	}
	start := time.Now()
	if rt.flight != nil {
		rt.flight.Add(1)
		defer rt.flight.Add(-1)
	}
	rt.rp.ServeHTTP(w, r)
	rt.metrics.served(start)
}

// tlsStateKey is the context key of the TLS state of a connection the lean
// path handed over to net/http.
type tlsStateKey struct{}

// fullDuplex lets the request body keep streaming to the target while the
// target's answer streams back (an echo, or an early answer to an upload):
// by default an HTTP/1 server discards or cuts off the unread request body
// as soon as the response starts. When the response starts before the body
// was read to its end, the connection is closed after the response rather
// than reused: what is left of the body may never be read, and in full
// duplex mode net/http would finish reading it after the handler and then
// race its next request read against it (golang/go#68560: "invalid
// concurrent Body.Read call", a dropped keep-alive connection).
func fullDuplex(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	if http.NewResponseController(w).EnableFullDuplex() != nil {
		return w, r
	}
	body := &bodyWatch{ReadCloser: r.Body}
	r2 := *r // shallow copy, as Request.WithContext does
	r2.Body = body
	return &duplexWriter{ResponseWriter: w, body: body}, &r2
}

// bodyWatch records whether a request body was read to its end.
type bodyWatch struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *bodyWatch) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// duplexWriter asks for the connection to be closed after a response that
// starts before its request body was read to the end.
type duplexWriter struct {
	http.ResponseWriter
	body        *bodyWatch
	wroteHeader bool
}

func (w *duplexWriter) WriteHeader(code int) {
	if !w.wroteHeader && code >= 200 {
		w.wroteHeader = true
		if !w.body.eof.Load() {
			w.Header().Set("Connection", "close")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *duplexWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController (flush, hijack) reach the server's
// writer.
func (w *duplexWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (p *Proxy) newServer(tlsConfig *tls.Config) *http.Server {
	return &http.Server{
		Handler:                      handler{p},
		TLSConfig:                    tlsConfig,
		ReadHeaderTimeout:            p.cfg.ReadHeaderTimeout,
		IdleTimeout:                  p.cfg.IdleTimeout,
		MaxHeaderBytes:               p.cfg.MaxHeaderBytes,
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		BaseContext:                  func(net.Listener) context.Context { return p.base },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if pc, ok := c.(*prefixConn); ok && pc.tls != nil {
				return context.WithValue(ctx, tlsStateKey{}, pc.tls)
			}
			return ctx
		},
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				p.counters.conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				p.counters.conns.Add(-1)
			}
		},
	}
}

// newTransport is the one connection pool to all targets: plain HTTP/1.1,
// keep-alive, no proxy from the environment, no transparent compression
// (the client's Accept-Encoding passes through).
func (p *Proxy) newTransport() *http.Transport {
	dialer := &net.Dialer{Timeout: p.cfg.DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext:           dialer.DialContext,
		MaxIdleConnsPerHost:   p.cfg.MaxIdleConnsPerTarget,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: p.cfg.ResponseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
}

var bufPool = &bufferPool{}

// bufferPool recycles the 32 KiB copy buffers of response bodies.
type bufferPool struct{ pool sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.pool.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.pool.Put(&buf) }

func (p *Proxy) reverseProxy(rt *httpRoute) *httputil.ReverseProxy {
	var transport http.RoundTripper = p.transport
	if len(rt.targets) > 1 {
		transport = &failoverTransport{route: rt, base: p.transport, log: p.log}
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = rt.pick()
			pr.Out.Host = pr.In.Host // the guest sees the name it is reached by
			p.setForwarded(pr)
		},
		Transport: transport,
		// Responses of unknown length (chunked, server-sent events) are
		// flushed on every write by ReverseProxy itself; a body of known
		// length is flushed at least every 100ms, so a slow one still
		// trickles through. Flushing those on every write too (-1) costs
		// a timer goroutine and an extra write per response.
		FlushInterval: 100 * time.Millisecond,
		BufferPool:    bufPool,
		ErrorLog:      slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.proxyError(w, r, rt, err)
		},
		ModifyResponse: func(resp *http.Response) error {
			p.counters.responses.add(resp.StatusCode)
			rt.metrics.answered(resp.StatusCode)
			return nil
		},
	}
}

// setForwarded sets X-Forwarded-For, -Proto and -Host on the outgoing
// request. ReverseProxy has already removed the client's copies from it;
// they are carried over only from a trusted proxy.
func (p *Proxy) setForwarded(pr *httputil.ProxyRequest) {
	in := pr.In
	clientIP, _, err := net.SplitHostPort(in.RemoteAddr)
	if err != nil {
		clientIP = in.RemoteAddr
	}
	xff, xfp, xfh := clientIP, "http", in.Host
	if in.TLS != nil {
		xfp = "https"
	}
	if p.trusts(clientIP) {
		if prior := in.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			xff = strings.Join(prior, ", ") + ", " + clientIP
		}
		if v := in.Header.Get("X-Forwarded-Proto"); v != "" {
			xfp = v
		}
		if v := in.Header.Get("X-Forwarded-Host"); v != "" {
			xfh = v
		}
	}
	h := pr.Out.Header
	h["X-Forwarded-For"] = []string{xff}
	h["X-Forwarded-Proto"] = []string{xfp}
	h["X-Forwarded-Host"] = []string{xfh}
}

func (p *Proxy) trusts(ip string) bool {
	if len(p.cfg.TrustedProxies) == 0 {
		return false
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, pfx := range p.cfg.TrustedProxies {
		if pfx.Contains(a) {
			return true
		}
	}
	return false
}

// proxyError answers a request whose target did not answer: 502 when the
// target could not be connected to or broke the exchange, 504 when it timed
// out. A request the client abandoned is counted as 499.
func (p *Proxy) proxyError(w http.ResponseWriter, r *http.Request, rt *httpRoute, err error) {
	if r.Context().Err() != nil {
		p.counters.errors.add(statusClientGone)
		rt.metrics.answered(statusClientGone)
		p.log.Debug("request abandoned", "host", rt.host, "err", err)
		// The client is gone (or the proxy is stopping): the answer is
		// for the record only.
		http.Error(w, "request cancelled", http.StatusBadGateway)
		return
	}
	code, msg, reason := upstreamFailure(rt.host, err)
	p.counters.errors.add(code)
	rt.metrics.answered(code)
	p.metrics.upstreamErrors.WithLabelValues(rt.host, reason).Inc()
	p.log.Warn("proxy error", "host", rt.host, "status", code, "err", err)
	http.Error(w, msg, code)
}

// upstreamFailure is the answer to a request whose target failed with err:
// the status, the message (the body, with a newline added) and the reason
// label of the upstream errors metric.
func upstreamFailure(host string, err error) (code int, msg, reason string) {
	switch {
	case isDialError(err):
		return http.StatusBadGateway, "502 bad gateway: the service for host " + host + " cannot be reached", "dial"
	case isTimeout(err):
		return http.StatusGatewayTimeout, "504 gateway timeout: the service for host " + host + " did not answer in time", "timeout"
	default:
		return http.StatusBadGateway, "502 bad gateway: the service for host " + host + " closed the connection or sent a bad response", "broken"
	}
}

// isDialError reports whether err is a failure to connect (refused, no
// route, dial timeout, name not found): nothing reached the target.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// dropped says whether err is a target dropping a request unanswered:
// the connection ended or was reset before any answer (an instance
// killed while the request was in flight).
func dropped(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// failoverTransport tries the other targets of a route, in round-robin
// order, when the first one cannot be connected to, or drops the request
// unanswered, and the request can be sent again safely: an idempotent
// method and no body.
type failoverTransport struct {
	route *httpRoute
	base  http.RoundTripper
	log   *slog.Logger
}

func (t *failoverTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err == nil || !(isDialError(err) || dropped(err)) || !retryable(req) {
		return resp, err
	}
	targets := t.route.targets
	first := max(t.route.indexOf(req.URL.Host), 0)
	t.route.markDown(first)
	for i := 1; i < len(targets) && req.Context().Err() == nil; i++ {
		next := targets[(first+i)%len(targets)]
		t.log.Debug("target unreachable, trying the next", "host", t.route.host, "target", req.URL.Host, "next", next, "err", err)
		retry := req.Clone(req.Context())
		retry.URL.Host = next
		resp, err = t.base.RoundTrip(retry)
		if err == nil || !(isDialError(err) || dropped(err)) {
			return resp, err
		}
		t.route.markDown((first + i) % len(targets))
		req = retry
	}
	return resp, err
}

// retryable reports whether req may be sent again after a failed dial.
func retryable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}
