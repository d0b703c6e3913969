package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// ResolverConfig configures a Resolver.
type ResolverConfig struct {
	// Addr is the host:port to listen on, UDP and TCP alike.
	Addr string `json:"addr"`
	// Zone is the cluster zone, answered by the cluster handler;
	// DefaultZone when empty.
	Zone string `json:"zone"`
	// Upstreams (host:port) get every other query, tried in order. Empty
	// means the name servers of ResolvConf.
	Upstreams []string `json:"upstreams"`
	// ResolvConf is read when Upstreams is empty; /etc/resolv.conf when
	// empty.
	ResolvConf string `json:"resolv_conf"`
	// Timeout bounds each upstream exchange; 2 s when 0.
	Timeout time.Duration `json:"timeout"`
	// CacheSize is the number of forwarded answers kept; 0 disables the
	// cache.
	CacheSize int `json:"cache_size"`
}

// Resolver is the forwarding resolver for guests. It answers the cluster
// zone with a pluggable handler and forwards everything else upstream, with
// an optional cache. Unlike Server it recurses, so it must only listen
// where guests reach it (a bridge address), never on a public address.
type Resolver struct {
	zone    string
	cluster dns.Handler
	fwd     *Forwarder
	cache   *cache
	addr    string
	log     *slog.Logger

	mu       sync.Mutex
	udp, tcp *dns.Server
	udpAddr  net.Addr
	tcpAddr  net.Addr
	wg       sync.WaitGroup
}

var _ dns.Handler = (*Resolver)(nil)

// NewResolver returns a resolver for cfg whose cluster zone is answered by
// cluster, for example ZoneHandler(src) or a Forwarder pointed at a
// coordinator. It returns ErrBadConfig for a bad config and ErrNoUpstream
// when no upstream is configured or found in resolv.conf.
func NewResolver(cfg ResolverConfig, cluster dns.Handler, logger *slog.Logger) (*Resolver, error) {
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("resolver addr %q: %w", cfg.Addr, ErrBadConfig)
	}
	if cluster == nil {
		return nil, fmt.Errorf("nil cluster handler: %w", ErrBadConfig)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	zone := cfg.Zone
	if zone == "" {
		zone = DefaultZone
	}
	ups := cfg.Upstreams
	if len(ups) == 0 {
		path := cfg.ResolvConf
		if path == "" {
			path = "/etc/resolv.conf"
		}
		cc, err := dns.ClientConfigFromFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, errors.Join(err, ErrNoUpstream))
		}
		for _, s := range cc.Servers {
			ups = append(ups, net.JoinHostPort(s, cc.Port))
		}
	}
	if len(ups) == 0 {
		return nil, ErrNoUpstream
	}
	r := &Resolver{
		zone:    dns.CanonicalName(zone),
		cluster: cluster,
		fwd:     &Forwarder{Upstreams: ups, Timeout: cfg.Timeout},
		addr:    cfg.Addr,
		log:     logger.With("component", "dns_resolver"),
	}
	if cfg.CacheSize > 0 {
		r.cache = newCache(cfg.CacheSize)
	}
	return r, nil
}

// Start binds the UDP and TCP sockets and serves in the background. It
// returns ErrAlreadyStarted when called twice.
func (r *Resolver) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.udp != nil {
		return ErrAlreadyStarted
	}
	pcs, ln, err := listenBoth(r.addr, 1)
	if err != nil {
		return err
	}
	pc := pcs[0]
	r.udp = &dns.Server{PacketConn: pc, Handler: r, UDPSize: maxQuerySize}
	r.tcp = &dns.Server{Listener: ln, Handler: r}
	r.udpAddr, r.tcpAddr = pc.LocalAddr(), ln.Addr()
	for _, d := range []*dns.Server{r.udp, r.tcp} {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := d.ActivateAndServe(); err != nil {
				r.log.Error("resolver listener stopped", "err", err)
			}
		}()
	}
	r.log.Info("dns resolver listening", "addr", r.udpAddr.String(), "upstreams", r.fwd.Upstreams)
	return nil
}

// UDPAddr returns the bound UDP address, or nil before Start.
func (r *Resolver) UDPAddr() net.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.udpAddr
}

// TCPAddr returns the bound TCP address, or nil before Start.
func (r *Resolver) TCPAddr() net.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tcpAddr
}

// Shutdown stops the listeners, waiting until ctx ends. It returns
// ErrNotStarted if the resolver was not started.
func (r *Resolver) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	udp, tcp := r.udp, r.tcp
	r.udp, r.tcp = nil, nil
	r.mu.Unlock()
	if udp == nil {
		return ErrNotStarted
	}
	err := errors.Join(udp.ShutdownContext(ctx), tcp.ShutdownContext(ctx))
	r.wg.Wait()
	return err
}

// ServeDNS implements dns.Handler.
func (r *Resolver) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	if len(req.Question) != 1 || req.Opcode != dns.OpcodeQuery {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeNotImplemented)
		if len(req.Question) != 1 {
			m.Rcode = dns.RcodeFormatError
		}
		_ = w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	if dns.IsSubDomain(r.zone, q.Name) {
		r.cluster.ServeDNS(raWriter{w}, req)
		return
	}
	if q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeRefused)
		_ = w.WriteMsg(m)
		return
	}
	udp := isUDP(w.LocalAddr())
	size := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		size = int(max(opt.UDPSize(), dns.MinMsgSize))
	}
	key := cacheKey(req)
	if r.cache != nil {
		if m := r.cache.get(key, time.Now()); m != nil {
			m.Id = req.Id
			m.Question = req.Question
			if udp {
				fit(m, size)
			}
			_ = w.WriteMsg(m)
			return
		}
	}
	m, err := r.fwd.Exchange(context.Background(), req)
	if err != nil {
		r.log.Debug("forwarding failed", "name", q.Name, "err", err)
		m = new(dns.Msg)
		m.SetRcode(req, dns.RcodeServerFailure)
		m.RecursionAvailable = true
		_ = w.WriteMsg(m)
		return
	}
	m.RecursionAvailable = true
	if r.cache != nil {
		r.cache.put(key, m, time.Now())
	}
	if udp {
		fit(m, size)
	}
	_ = w.WriteMsg(m)
}

// raWriter marks every answer it writes with RA, since the resolver
// recurses on the client's behalf.
type raWriter struct{ dns.ResponseWriter }

func (w raWriter) WriteMsg(m *dns.Msg) error {
	m.RecursionAvailable = true
	return w.ResponseWriter.WriteMsg(m)
}

// Forwarder is a dns.Handler that sends each query to upstream servers in
// order, over UDP and then TCP when the answer is truncated. It answers
// SERVFAIL when none replies. Point one at a coordinator to serve the
// cluster zone through a Resolver without a local RecordSource.
type Forwarder struct {
	// Upstreams are host:port addresses.
	Upstreams []string
	// Timeout bounds each exchange; 2 s when 0.
	Timeout time.Duration
}

var _ dns.Handler = (*Forwarder)(nil)

// Exchange sends req upstream and returns the first answer; the caller
// owns it. It returns ErrNoUpstream, joined with the last error, when no
// upstream answered.
func (f *Forwarder) Exchange(ctx context.Context, req *dns.Msg) (*dns.Msg, error) {
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	var last error
	for _, up := range f.Upstreams {
		c := &dns.Client{Net: "udp", Timeout: timeout, UDPSize: dns.DefaultMsgSize}
		m, _, err := c.ExchangeContext(ctx, req, up)
		if err == nil && m.Truncated {
			c.Net = "tcp"
			m, _, err = c.ExchangeContext(ctx, req, up)
		}
		if err == nil {
			return m, nil
		}
		last = err
	}
	return nil, errors.Join(ErrNoUpstream, last)
}

// ServeDNS implements dns.Handler.
func (f *Forwarder) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m, err := f.Exchange(context.Background(), req)
	if err != nil {
		m = new(dns.Msg)
		m.SetRcode(req, dns.RcodeServerFailure)
	}
	_ = w.WriteMsg(m)
}

// ZoneHandler returns a dns.Handler answering authoritatively from src as
// Server does, without rate limiting or transfers; names outside the zone
// are REFUSED. Use it as the cluster handler of a Resolver.
func ZoneHandler(src RecordSource) dns.Handler {
	cfg := DefaultConfig()
	cfg.RateLimit.PerSecond = 0
	s, err := New(cfg, src, nil)
	if err != nil {
		panic(err) // the defaults always validate
	}
	return s
}
