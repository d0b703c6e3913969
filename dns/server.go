package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"corpus/internal/metrics"
)

// Server is the authoritative DNS server for one zone. It answers from a
// RecordSource over UDP and TCP, never recurses, and refuses names outside
// the zone. Create it with New, then Start it; Shutdown stops it.
type Server struct {
	cfg     Config
	src     RecordSource
	log     *slog.Logger
	limit   *limiter
	tsig    map[string]string
	allow   []netip.Prefix
	xfrKey  map[string]bool
	metrics *serverMetrics
	// table holds the fast path's answers for the source's zone; see
	// buildTables.
	table atomic.Pointer[answerTable]

	mu      sync.Mutex
	started bool
	udp     []*dns.Server // one per UDP socket
	tcp     *dns.Server
	udpAddr net.Addr
	tcpAddr net.Addr
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

var _ dns.Handler = (*Server)(nil)

// New returns a server for cfg answering from src. It returns ErrBadConfig
// when cfg does not validate. A nil logger discards logs.
func New(cfg Config, src RecordSource, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if src == nil {
		return nil, fmt.Errorf("nil record source: %w", ErrBadConfig)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:     cfg,
		src:     src,
		log:     logger.With("component", "dns"),
		tsig:    cfg.Transfer.tsigSecrets(),
		allow:   cfg.Transfer.AllowFrom,
		xfrKey:  map[string]bool{},
		metrics: newServerMetrics(metrics.Registerer(cfg.Metrics), src),
	}
	for name := range s.tsig {
		s.xfrKey[name] = true
	}
	if cfg.RateLimit.PerSecond > 0 {
		s.limit = newLimiter(cfg.RateLimit)
	}
	return s, nil
}

// Start binds the UDP and TCP sockets and serves in the background. It
// returns ErrAlreadyStarted when called twice, and the bind error if a
// socket cannot be opened.
//
// It binds Config.UDPSockets UDP sockets to the address (GOMAXPROCS when
// 0; one where SO_REUSEPORT is missing), each read by its own goroutine
// that answers what the fast path can on the spot. Before it returns, it
// builds the fast path's table for the source's zone; a goroutine rebuilds
// it whenever the zone changes.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return ErrAlreadyStarted
	}
	pcs, ln, err := listenBoth(s.cfg.Addr, udpSockets(s.cfg.udpSockets()))
	if err != nil {
		return err
	}
	socks := make([]*udpSocket, 0, len(pcs))
	for _, pc := range pcs {
		u, err := newUDPSocket(s, pc)
		if err != nil {
			ln.Close()
			for _, pc := range pcs {
				pc.Close()
			}
			return err
		}
		socks = append(socks, u)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	zone, changed := s.src.Snapshot()
	s.table.Store(buildTable(zone))
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.buildTables(ctx, changed)
	}()

	ln = &limitListener{Listener: ln, sem: make(chan struct{}, s.cfg.MaxTCPConns)}
	idle := s.cfg.TCPIdleTimeout
	common := func(d *dns.Server) *dns.Server {
		d.Handler = s
		d.TsigSecret = s.tsig
		d.MsgAcceptFunc = acceptMsg
		d.ReadTimeout = s.cfg.TCPReadTimeout
		d.WriteTimeout = s.cfg.TCPReadTimeout
		return d
	}
	s.udp = s.udp[:0]
	for _, u := range socks {
		s.udp = append(s.udp, common(&dns.Server{PacketConn: u, UDPSize: maxQuerySize,
			DecorateReader: func(r dns.Reader) dns.Reader { return udpReader{Reader: r, u: u} }}))
	}
	s.tcp = common(&dns.Server{Listener: ln, IdleTimeout: func() time.Duration { return idle }})
	s.udpAddr, s.tcpAddr = pcs[0].LocalAddr(), ln.Addr()
	// Start returns once all serve: a Shutdown before that would find
	// a server "not started" that then serves forever.
	for _, d := range append(slices.Clone(s.udp), s.tcp) {
		serving, exited := make(chan struct{}), make(chan struct{})
		d.NotifyStartedFunc = func() { close(serving) }
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer close(exited)
			if err := d.ActivateAndServe(); err != nil {
				s.log.Error("dns listener stopped", "err", err)
			}
		}()
		select {
		case <-serving:
		case <-exited:
		}
	}
	if len(s.cfg.Transfer.Secondaries) > 0 {
		n := newNotifier(s.cfg.Transfer, s.tsig, s.src, s.log)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			n.run(ctx)
		}()
	}
	s.started = true
	s.log.Info("dns server listening", "udp", s.udpAddr.String(), "tcp", s.tcpAddr.String(), "udp_sockets", len(s.udp))
	return nil
}

// buildTables rebuilds the fast path's table each time the source's zone
// changes, until ctx ends. Builds are not queued: after a build it takes
// the newest zone, however many came in between, and not before
// tableBuildShare times the build's time has passed, so that building
// takes at most that share of a CPU while the zone changes all the time.
// Until a table is stored, queries about the new zone take the full
// path.
func (s *Server) buildTables(ctx context.Context, changed <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		start := time.Now()
		var zone *Zone
		zone, changed = s.src.Snapshot()
		s.table.Store(buildTable(zone))
		if rest := (tableBuildShare - 1) * time.Since(start); rest > time.Millisecond {
			select {
			case <-ctx.Done():
				return
			case <-time.After(rest):
			}
		}
	}
}

// tableBuildShare is the inverse of the share of a CPU the fast path's
// table builds may take (see buildTables).
const tableBuildShare = 10

// listenBoth opens TCP and n UDP sockets on addr; with port 0 it retries
// until all get the same port.
func listenBoth(addr string, n int) ([]*net.UDPConn, net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	var lastErr error
	for range 20 {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("listening on tcp %s: %w", addr, err)
		}
		_, p, _ := net.SplitHostPort(ln.Addr().String())
		pcs, err := listenUDP(net.JoinHostPort(host, p), n)
		if err == nil {
			return pcs, ln, nil
		}
		ln.Close()
		lastErr = err
		if port != "0" {
			break
		}
	}
	return nil, nil, fmt.Errorf("listening on udp %s: %w", addr, lastErr)
}

// UDPAddr returns the bound UDP address, or nil before Start.
func (s *Server) UDPAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.udpAddr
}

// TCPAddr returns the bound TCP address, or nil before Start.
func (s *Server) TCPAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tcpAddr
}

// Shutdown stops the listeners and the notifier and waits for them until
// ctx ends. It returns ErrNotStarted if the server was not started.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.started {
		s.mu.Unlock()
		return ErrNotStarted
	}
	s.started = false
	s.cancel()
	servers := append(slices.Clone(s.udp), s.tcp)
	s.mu.Unlock()
	var err error
	for _, d := range servers {
		err = errors.Join(err, d.ShutdownContext(ctx))
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, ctx.Err())
	}
	return err
}

// acceptMsg is dns.DefaultMsgAcceptFunc: responses are ignored, opcodes
// other than QUERY and NOTIFY get NOTIMP, anything but one question FORMERR.
// The reply to a rejected message is its header (and question) only, so it
// is never larger than the query.
func acceptMsg(h dns.Header) dns.MsgAcceptAction {
	return dns.DefaultMsgAcceptFunc(h)
}

// ServeDNS implements dns.Handler; the listeners call it for every
// message that passed acceptMsg.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	udp := isUDP(w.LocalAddr())
	if udp && s.limit != nil {
		switch s.limit.take(addrOf(w.RemoteAddr()), time.Now()) {
		case verdictDrop:
			s.metrics.dropped.Inc()
			return
		case verdictSlip:
			s.metrics.slipped.Inc()
			m := new(dns.Msg)
			m.SetReply(r)
			m.Truncated = true
			_ = w.WriteMsg(m)
			return
		}
	}
	if len(r.Question) == 1 && r.Opcode == dns.OpcodeQuery && !udp {
		if t := r.Question[0].Qtype; t == dns.TypeAXFR || t == dns.TypeIXFR {
			s.transfer(w, r)
			return
		}
	}
	m := s.respond(r, udp, w.TsigStatus(), addrOf(w.RemoteAddr()))
	s.metrics.answered(r, m.Rcode)
	if err := w.WriteMsg(m); err != nil {
		s.log.Debug("writing answer", "remote", w.RemoteAddr().String(), "err", err)
	}
}

// respond computes the answer to r. udp says the transport; tsigErr is the
// TSIG verification result of r; remote is the client's address.
func (s *Server) respond(r *dns.Msg, udp bool, tsigErr error, remote netip.Addr) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionDesired = r.RecursionDesired
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		return m
	}
	if r.Opcode != dns.OpcodeQuery {
		m.Rcode = dns.RcodeNotImplemented
		return m
	}
	tsig := r.IsTsig()
	if tsig != nil && tsigErr != nil {
		m.Rcode = dns.RcodeNotAuth
		return m
	}
	opt := r.IsEdns0()
	size := dns.MinMsgSize
	if opt != nil {
		if opt.Version() != 0 {
			m.Rcode = dns.RcodeBadVers
			m.SetEdns0(s.cfg.MaxUDPSize, opt.Do())
			m.IsEdns0().SetExtendedRcode(dns.RcodeBadVers)
			return m
		}
		size = int(min(max(opt.UDPSize(), dns.MinMsgSize), s.cfg.MaxUDPSize))
	}
	q := r.Question[0]
	zone, _ := s.src.Snapshot()
	switch {
	case q.Qclass != dns.ClassINET || !dns.IsSubDomain(zone.Origin(), q.Name):
		m.Rcode = dns.RcodeRefused
	case q.Qtype == dns.TypeAXFR:
		m.Rcode = dns.RcodeRefused // TCP only
	case q.Qtype == dns.TypeIXFR:
		s.ixfrUDP(m, r, zone, remote)
	case q.Qtype == dns.TypeOPT || q.Qtype == dns.TypeTSIG || q.Qtype == dns.TypeMAILA || q.Qtype == dns.TypeMAILB:
		m.Rcode = dns.RcodeFormatError
	default:
		zone.Answer(m, q)
	}
	if opt != nil {
		m.SetEdns0(s.cfg.MaxUDPSize, opt.Do())
	}
	if udp {
		fit(m, size)
	}
	if tsig != nil {
		m.SetTsig(tsig.Hdr.Name, tsig.Algorithm, tsig.Fudge, time.Now().Unix())
	}
	m.Compress = true
	return m
}

// fit makes m at most size bytes: first the additional section goes (but
// the OPT record), then answers, setting TC.
func fit(m *dns.Msg, size int) {
	m.Compress = true
	if m.Len() <= size {
		return
	}
	opt := m.IsEdns0()
	m.Extra = m.Extra[:0]
	if opt != nil {
		m.Extra = append(m.Extra, opt)
	}
	m.Truncate(size)
}

func isUDP(a net.Addr) bool {
	_, ok := a.(*net.UDPAddr)
	return ok
}

func addrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *udpPeer:
		return a.Addr().Unmap().WithZone("")
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}

// limitListener closes connections beyond its semaphore's capacity at once
// instead of queueing them.
type limitListener struct {
	net.Listener
	sem chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.sem <- struct{}{}:
			return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
		default:
			c.Close()
		}
	}
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
