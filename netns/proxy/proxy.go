package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/internal/metrics"
	"corpus/netns/listen"
)

// CertFiles names one PEM certificate chain and its private key.
type CertFiles struct {
	CertFile string
	KeyFile  string
}

// Config configures a Proxy. Zero fields take the values of DefaultConfig,
// except HTTPSAddr (empty: no HTTPS), TCPHost (empty: all addresses) and
// TrustedProxies (empty: trust no one).
type Config struct {
	// HTTPAddr is the plain HTTP listen address, ":80" by default. Port 0
	// picks a free port; HTTPAddr() tells which.
	HTTPAddr string
	// HTTPSAddr is the HTTPS listen address; empty disables HTTPS.
	HTTPSAddr string
	// Certs are certificate files HTTPS serves for the names no route's
	// certificate (Routes.TLS) covers. A client's SNI name picks the
	// certificate whose names match it (exactly, else by a *.parent
	// wildcard in the certificate); without a match the first one is used.
	Certs []CertFiles
	// TCPHost is the address TCP route listeners bind to, with the route's
	// port; empty binds all addresses.
	TCPHost string

	// DialTimeout bounds connecting to a target (HTTP and TCP).
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a target's response headers
	// once the request is sent; past it the client gets 504.
	ResponseHeaderTimeout time.Duration
	// ReadHeaderTimeout bounds reading a client's request headers.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a client keep-alive connection idle this long.
	IdleTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown when Run's context ends;
	// connections still open then are closed.
	ShutdownTimeout time.Duration
	// MaxHeaderBytes limits the size of a client's request headers; larger
	// ones get 431.
	MaxHeaderBytes int
	// MaxIdleConnsPerTarget is how many idle keep-alive connections are
	// kept to each target.
	MaxIdleConnsPerTarget int
	// TrustedProxies are the client addresses whose X-Forwarded-For,
	// X-Forwarded-Proto and X-Forwarded-Host headers are kept (the client
	// address is appended to X-Forwarded-For). From anyone else those
	// headers are replaced.
	TrustedProxies []netip.Prefix

	// Inherited are listeners a predecessor handed over (see
	// [Proxy.Listeners]), by name: "http", "https", "tcp:PORT". The
	// proxy serves on them instead of binding its addresses anew, so no
	// connection is refused while one process takes over from another.
	Inherited map[string]net.Listener

	// Logger receives the proxy's logs; nil discards them.
	Logger *slog.Logger
	// Metrics receives the proxy's Prometheus metrics (nil: unserved).
	Metrics prometheus.Registerer
}

// DefaultConfig returns the configuration used for fields left zero.
func DefaultConfig() Config {
	return Config{
		HTTPAddr:              ":80",
		DialTimeout:           5 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		ReadHeaderTimeout:     10 * time.Second,
		IdleTimeout:           120 * time.Second,
		ShutdownTimeout:       10 * time.Second,
		MaxHeaderBytes:        64 << 10,
		MaxIdleConnsPerTarget: 256,
	}
}

// withDefaults fills the zero fields of c from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.HTTPAddr == "" {
		c.HTTPAddr = d.HTTPAddr
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setDur(&c.DialTimeout, d.DialTimeout)
	setDur(&c.ResponseHeaderTimeout, d.ResponseHeaderTimeout)
	setDur(&c.ReadHeaderTimeout, d.ReadHeaderTimeout)
	setDur(&c.IdleTimeout, d.IdleTimeout)
	setDur(&c.ShutdownTimeout, d.ShutdownTimeout)
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if c.MaxIdleConnsPerTarget == 0 {
		c.MaxIdleConnsPerTarget = d.MaxIdleConnsPerTarget
	}
	return c
}

// Validate reports the problems of c (after defaults are applied), each
// wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	for name, d := range map[string]time.Duration{
		"dial_timeout": c.DialTimeout, "response_header_timeout": c.ResponseHeaderTimeout,
		"read_header_timeout": c.ReadHeaderTimeout, "idle_timeout": c.IdleTimeout,
		"shutdown_timeout": c.ShutdownTimeout,
	} {
		if d < 0 {
			bad("%s %v is negative", name, d)
		}
	}
	if c.MaxHeaderBytes < 0 {
		bad("max_header_bytes %d is negative", c.MaxHeaderBytes)
	}
	if c.MaxIdleConnsPerTarget < 0 {
		bad("max_idle_conns_per_target %d is negative", c.MaxIdleConnsPerTarget)
	}
	if c.HTTPSAddr == "" && len(c.Certs) > 0 {
		bad("certificates given without https_addr")
	}
	for _, p := range c.TrustedProxies {
		if !p.IsValid() {
			bad("trusted proxy prefix %v is not valid", p)
		}
	}
	return errors.Join(errs...)
}

// drainSettle is how long a stopping proxy goes on reading requests from
// the connections it has before it shuts them down.
const drainSettle = 500 * time.Millisecond

// Proxy is the node's proxy ingress. Create it with New, give it routes with
// SetRoutes (before or while it runs) and serve with Run. All methods are
// safe for concurrent use.
type Proxy struct {
	cfg       Config
	log       *slog.Logger
	table     atomic.Pointer[table]
	transport *http.Transport // net/http's way to the targets
	upstreams *upstreams      // the lean path's
	health    *healthSet      // of the targets of routes with several
	counters  counters
	metrics   *proxyMetrics
	static    *certSet // the configured certificate files, nil without any

	httpLn, httpsLn   net.Listener
	httpSrv, httpsSrv *http.Server
	httpH1, httpsH1   *h1Server // the lean path of each listener
	// draining is set when the proxy stops: answers then close their
	// connections.
	draining atomic.Bool

	// base is the context of every request and TCP connection; it is
	// cancelled when a shutdown runs out of time, which ends upgraded
	// (websocket) connections and dials in progress.
	base       context.Context
	cancelBase context.CancelFunc

	mu           sync.Mutex
	running      bool
	closed       bool
	tcpListeners map[int]net.Listener
	inherited    map[string]net.Listener // handed over, not yet in use
	tcpConns     map[net.Conn]struct{}
	tcpWG        sync.WaitGroup // accept loops and TCP connections
	done         chan struct{}  // closed when the proxy stops

	// flights counts the HTTP requests in flight per target, so a caller
	// that moved a route away from a target knows when it is drained.
	flights sync.Map // target → *atomic.Int64
}

// flight is the in-flight counter of a target.
func (p *Proxy) flight(target string) *atomic.Int64 {
	if c, ok := p.flights.Load(target); ok {
		return c.(*atomic.Int64)
	}
	c, _ := p.flights.LoadOrStore(target, new(atomic.Int64))
	return c.(*atomic.Int64)
}

// InFlight is how many HTTP requests to target are being served now,
// through routes with that one target.
func (p *Proxy) InFlight(target string) int64 {
	if c, ok := p.flights.Load(target); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// New checks cfg, loads the certificates and binds the HTTP (and HTTPS)
// listeners, so HTTPAddr and HTTPSAddr are known before Run. The proxy
// starts with no routes. Errors wrap ErrInvalidConfig, ErrCertificate or
// ErrListen (a *listen.Error, saying who holds an address in use). A
// Proxy from New must be run with Run or released with Close.
func New(cfg Config) (_ *Proxy, err error) {
	defer func() {
		if err != nil { // the inherited listeners were given to it
			for _, ln := range cfg.Inherited {
				ln.Close()
			}
		}
	}()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "proxy")

	var static *certSet
	if len(cfg.Certs) > 0 {
		if static, err = loadCerts(cfg.Certs); err != nil {
			return nil, err
		}
	}

	p := &Proxy{
		cfg:          cfg,
		static:       static,
		log:          log,
		tcpListeners: map[int]net.Listener{},
		tcpConns:     map[net.Conn]struct{}{},
		done:         make(chan struct{}),
	}
	p.metrics = newProxyMetrics(metrics.Registerer(cfg.Metrics), &p.counters)
	p.base, p.cancelBase = context.WithCancel(context.Background())
	p.health = newHealthSet(p.base)
	p.transport = p.newTransport()
	p.upstreams = &upstreams{
		dialer: net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second},
		max:    cfg.MaxIdleConnsPerTarget,
	}
	p.table.Store(p.compile(Routes{}, &tlsTable{}))

	p.inherited = maps.Clone(cfg.Inherited)
	if p.httpLn, err = p.listen("http", cfg.HTTPAddr); err != nil {
		p.cancelBase()
		return nil, listen.Describe("http", cfg.HTTPAddr, err)
	}
	p.httpSrv = p.newServer(nil)
	p.httpH1 = p.newH1Server(p.httpLn, p.httpSrv, nil)
	if cfg.HTTPSAddr != "" {
		if p.httpsLn, err = p.listen("https", cfg.HTTPSAddr); err != nil {
			p.httpLn.Close()
			p.cancelBase()
			return nil, listen.Describe("https", cfg.HTTPSAddr, err)
		}
		tlsConfig := &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: p.getCertificate,
			// acme-tls/1 answers tls-alpn-01 challenges (the handshake is
			// all the CA wants).
			NextProtos: []string{"h2", "http/1.1", acmeTLSProto},
		}
		// net/http's HTTP/2 set-up changes the configuration it is given:
		// a copy of its own, the lean path's handshakes reading the other.
		p.httpsSrv = p.newServer(tlsConfig.Clone())
		p.httpsH1 = p.newH1Server(p.httpsLn, p.httpsSrv, tlsConfig)
	}
	return p, nil
}

// listen is the inherited listener of that name when it listens on
// addr, else a new one on addr.
func (p *Proxy) listen(name, addr string) (net.Listener, error) {
	if ln, ok := p.inherited[name]; ok {
		delete(p.inherited, name)
		if listen.On(ln, addr) {
			p.log.Info("serving on an inherited listener", "listener", name, "addr", ln.Addr().String())
			return ln, nil
		}
		p.log.Info("an inherited listener listens elsewhere: binding anew", "listener", name, "inherited", ln.Addr().String(), "addr", addr)
		ln.Close()
	}
	return net.Listen("tcp", addr)
}

// closeInherited closes the inherited listeners no route took.
func (p *Proxy) closeInherited() {
	for name, ln := range p.inherited {
		ln.Close()
		delete(p.inherited, name)
	}
}

// Listeners returns copies (new file descriptors) of the proxy's
// listening sockets, by name ("http", "https", "tcp:PORT"), for a
// successor to serve on: see Config.Inherited. The caller closes them.
func (p *Proxy) Listeners() (map[string]*os.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	lns := map[string]net.Listener{"http": p.httpLn}
	if p.httpsLn != nil {
		lns["https"] = p.httpsLn
	}
	for port, ln := range p.tcpListeners {
		lns["tcp:"+strconv.Itoa(port)] = ln
	}
	out := make(map[string]*os.File, len(lns))
	for name, ln := range lns {
		tl, ok := ln.(*net.TCPListener)
		if !ok {
			continue
		}
		f, err := tl.File()
		if err != nil {
			for _, f := range out {
				f.Close()
			}
			return nil, fmt.Errorf("listener %s: %w", name, err)
		}
		out[name] = f
	}
	return out, nil
}

// Certificates returns the HTTPS certificates (leaves), in the order of
// Config.Certs; the caller must not change them.
func (p *Proxy) Certificates() []*x509.Certificate {
	if p.static == nil {
		return nil
	}
	return p.static.all
}

// HTTPAddr returns the address the HTTP listener is bound to.
func (p *Proxy) HTTPAddr() net.Addr { return p.httpLn.Addr() }

// HTTPSAddr returns the address the HTTPS listener is bound to, or nil when
// HTTPS is off.
func (p *Proxy) HTTPSAddr() net.Addr {
	if p.httpsLn == nil {
		return nil
	}
	return p.httpsLn.Addr()
}

// Routes returns a copy of the routes in force; the caller owns it.
func (p *Proxy) Routes() Routes { return p.table.Load().routes.clone() }

// SetRoutes replaces the whole routing table with a copy of r. An invalid r
// changes nothing and the error wraps the Validate errors. Otherwise the new
// table serves every request and TCP connection that starts from now on;
// those already started finish on their old target. TCP listeners are then
// opened and closed to match r.TCP; closing a listener leaves its accepted
// connections running. A port that cannot be listened on is reported with
// ErrListen while the rest of r stays in force; a later SetRoutes tries it
// again. After Close or the end of Run it returns ErrClosed.
func (p *Proxy) SetRoutes(r Routes) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("setting routes: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	r = r.clone()
	tt, err := compileTLS(r)
	if err != nil {
		return fmt.Errorf("setting routes: %w", err)
	}
	t := p.compile(r, tt)
	old := p.table.Load()
	p.metrics.forget(old.http, t.http)
	p.table.Store(t)
	p.releaseHealth(old)
	err = p.syncTCPListeners(r.TCP)
	p.log.Info("routes set", "http_routes", len(r.HTTP), "tcp_routes", len(r.TCP))
	return err
}

// Run serves until ctx ends, then shuts down gracefully: listeners close at
// once, requests and TCP connections in flight get up to ShutdownTimeout to
// finish, and whatever is left is then closed. It returns nil after a
// shutdown caused by ctx or Close, ErrRunning or ErrClosed when misused, and
// the error of a listener that failed.
func (p *Proxy) Run(ctx context.Context) error {
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return ErrClosed
	case p.running:
		p.mu.Unlock()
		return ErrRunning
	}
	p.running = true
	p.mu.Unlock()

	errc := make(chan error, 4)
	for _, s := range p.h1Servers() {
		go func() { errc <- s.serve() }()
		go func() { errc <- s.srv.Serve(s.handoff) }()
	}
	janitorDone := make(chan struct{})
	defer close(janitorDone)
	go p.upstreamJanitor(janitorDone)
	p.log.Info("proxy serving", "http_addr", p.HTTPAddr().String(), "https_addr", addrString(p.HTTPSAddr()))

	var serveErr error
	select {
	case <-ctx.Done():
	case <-p.done:
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			serveErr = fmt.Errorf("serving: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), p.cfg.ShutdownTimeout)
	defer cancel()
	p.shutdown(sctx)
	p.log.Info("proxy stopped")
	return serveErr
}

// Close stops the proxy at once: listeners and every connection are closed
// without waiting. It is safe to call at any time, also while Run runs (Run
// then returns) and more than once.
func (p *Proxy) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.shutdown(ctx)
	return nil
}

// shutdown stops accepting, waits for requests and TCP connections until ctx
// ends, then closes whatever is left. Concurrent and repeated calls are safe.
func (p *Proxy) shutdown(ctx context.Context) {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.done)
		p.closeInherited()
		for port, ln := range p.tcpListeners {
			ln.Close()
			delete(p.tcpListeners, port)
		}
	}
	p.mu.Unlock()

	// Stop accepting (Shutdown would too; these also cover a proxy that
	// never ran), and answer what comes with Connection: close.
	p.httpLn.Close()
	if p.httpsLn != nil {
		p.httpsLn.Close()
	}
	p.draining.Store(true)
	for _, srv := range []*http.Server{p.httpSrv, p.httpsSrv} {
		if srv != nil {
			srv.SetKeepAlivesEnabled(false)
		}
	}
	// A connection accepted just before the listeners closed sends its
	// request a moment later, and http.Server.Shutdown drops a request it
	// reads once shutting down: give those time to arrive and be served
	// (another process taking the listeners over serves the new ones).
	settle := time.NewTimer(drainSettle)
	select {
	case <-settle.C:
	case <-ctx.Done():
		settle.Stop()
	}
	for p.counters.inFlight.Load() > 0 && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	var wg sync.WaitGroup
	for _, s := range p.h1Servers() {
		wg.Go(func() {
			if err := s.srv.Shutdown(ctx); err != nil {
				s.srv.Close()
			}
		})
		wg.Go(func() { s.shutdown(ctx) })
	}
	tcpDone := make(chan struct{})
	go func() { p.tcpWG.Wait(); close(tcpDone) }()
	wg.Wait()
	// Upgraded (websocket) requests are hijacked, so Shutdown does not wait
	// for them; their handlers still count as in flight.
	for p.counters.inFlight.Load() > 0 && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case <-tcpDone:
	case <-ctx.Done():
	}
	// Out of time or done: end upgraded connections, dials and TCP copies.
	p.cancelBase()
	p.mu.Lock()
	for c := range p.tcpConns {
		c.Close()
	}
	p.mu.Unlock()
	<-tcpDone
	p.transport.CloseIdleConnections()
	p.upstreams.closeIdle(time.Now().Add(time.Hour))
}

// h1Servers are the lean servers of the HTTP and HTTPS listeners.
func (p *Proxy) h1Servers() []*h1Server {
	if p.httpsH1 == nil {
		return []*h1Server{p.httpH1}
	}
	return []*h1Server{p.httpH1, p.httpsH1}
}

// upstreamJanitor closes the lean path's idle target connections that
// stayed unused too long, until done is closed.
func (p *Proxy) upstreamJanitor(done <-chan struct{}) {
	tick := time.NewTicker(upstreamIdleTimeout / 3)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-tick.C:
			p.upstreams.closeIdle(now.Add(-upstreamIdleTimeout))
		}
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
