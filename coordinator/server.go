package coordinator

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"corpus/coordinator/api"
	"corpus/coordinator/api/serve"
	"corpus/coordinator/auth"
	"corpus/coordinator/autoscale"
	"corpus/coordinator/carotation"
	"corpus/coordinator/extensions"
	"corpus/coordinator/ldapauth"
	"corpus/coordinator/scheduler"
	"corpus/coordinator/series"
	"corpus/coordinator/snapshotschedule"
	"corpus/coordinator/state"
	"corpus/coordinator/templates"
	"corpus/coordinator/tokenuse"
	"corpus/coordinator/ui"
	"corpus/dns"
	"corpus/internal/atomicfile"
	"corpus/internal/clock"
	"corpus/internal/gossip"
	"corpus/internal/metrics"
	"corpus/internal/names"
	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/sdnotify"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Config configures one coordinator replica.
type Config struct {
	// DataDir holds the Raft log, snapshots and the bootstrap token.
	DataDir string
	// Clock is the time of day the replica stamps Raft entries, dates
	// tokens and certificates and checks their expiry by (nil:
	// clock.System). TLS handshakes check certificates by clock.System.
	Clock clock.Clock
	// APIAddr is where the API listens (host:port; port 0 picks one).
	APIAddr string
	// RaftAddr is where the Raft transport listens.
	RaftAddr string
	// ReplicaID names this replica in the Raft group; default "coordinator-1".
	ReplicaID string
	// Bootstrap makes this replica form a new group when it has no Raft
	// state yet: alone when BootstrapExpect is 1, else with the replicas
	// it finds through Join once BootstrapExpect of them know each other.
	Bootstrap       bool
	BootstrapExpect int
	// Join are API addresses of the other replicas.
	Join []string
	// AdvertiseAPI is the API address peers and clients use; default
	// APIAddr.
	AdvertiseAPI string
	// RaftSnapshotThreshold and RaftTrailingLogs tune log compaction:
	// entries between snapshots, and entries kept after one (a replica
	// further behind catches up from the snapshot). 0 keeps Raft's
	// defaults.
	RaftSnapshotThreshold uint64
	RaftTrailingLogs      uint64
	// RaftMultiplier scales the Raft heartbeat, election and leader lease
	// timeouts (500, 500 and 250 ms at 1) for busy or slow hosts; 1 to 10.
	RaftMultiplier int
	// GuestNetwork is the cluster range nodes get guest subnets of
	// NodeSubnetBits from; both are fixed when the cluster bootstraps.
	GuestNetwork   string
	NodeSubnetBits int
	// NodeTimeout is how long a node may go without reporting before it
	// is marked down.
	NodeTimeout time.Duration
	// GossipAddr is where this replica's gossip member listens (UDP and
	// TCP, host:port); agents join it, and a node whose member is found
	// dead is marked down at once. Empty turns gossip off: liveness then
	// rests on heartbeats alone. Give a specific address agents reach:
	// it is also the one advertised.
	GossipAddr string
	// DNS is the authoritative DNS server every replica runs for the
	// cluster zone DNSZone, answering from its own copy of the state. An
	// empty DNS.Addr turns it off.
	DNS     dns.Config
	DNSZone string
	// CACertFile and CAKeyFile are the cluster CA to use when this
	// replica has none yet (every replica of a group gets the same);
	// empty on a replica bootstrapping alone creates one. CertTTL is the
	// lifetime of the certificates it issues (default DefaultCertTTL).
	CACertFile string
	CAKeyFile  string
	CertTTL    time.Duration
	Logger     *slog.Logger
	// Metrics receives the component's Prometheus metrics; nil keeps
	// them unserved.
	Metrics prometheus.Registerer
	// Heart, when set, beats each time this replica answers its own
	// /healthz (the API, Raft and the state all going), for the service
	// manager's readiness and watchdog (see internal/sdnotify).
	Heart *sdnotify.Heart

	// LDAP, when its URL is set, lets users created with auth "ldap" log
	// in with their directory password (corpus login --ldap); the tokens
	// that issues work for LoginTokenTTL.
	LDAP          ldapauth.Config
	LoginTokenTTL time.Duration
	// AutoscaleInterval is how often the leader samples the load of
	// autoscaled environments and decides.
	AutoscaleInterval time.Duration
	// SeriesInterval is how often each replica samples the values the
	// dashboard plots (node allocation, domain request and error rates).
	SeriesInterval time.Duration
	// TokenUseInterval is the grain of users' tokens' recorded last
	// uses: how often each replica writes those it served (one entry for
	// all the tokens used meanwhile).
	TokenUseInterval time.Duration
	// CATrustPeriod is the least a rotation of the cluster CA stays in
	// its trust phase, so that clients following it (the CLI's
	// `operator ca rotate`, others polling `ca status --pem`) trust the
	// new CA before it signs.
	CATrustPeriod time.Duration

	// RestoreFile, when set, starts a new group of this replica alone
	// from a snapshot file (corpus operator snapshot save) opened with the
	// secret in RestoreKeyFile; the data folder must be empty (or hold the
	// cluster restored already).
	RestoreFile    string
	RestoreKeyFile string
	// Snapshots are the scheduled snapshots the leader writes (off when
	// their Dir is empty).
	Snapshots snapshotschedule.Config

	// ServiceTemplates is the operators' folder of service templates,
	// added to the built-in ones (coordinator/templates); missing is
	// fine.
	ServiceTemplates string
}

// Default returns the configuration of a one-replica coordinator.
func Default() Config {
	return Config{
		DataDir:         "/var/lib/corpus/coordinator",
		APIAddr:         "127.0.0.1:7400",
		RaftAddr:        "127.0.0.1:7401",
		ReplicaID:       "coordinator-1",
		Bootstrap:       true,
		BootstrapExpect: 1,
		NodeTimeout:     15 * time.Second,
		GossipAddr:      "127.0.0.1:7403",

		GuestNetwork:      state.DefaultGuestNetwork,
		NodeSubnetBits:    state.DefaultNodeSubnetBits,
		DNS:               defaultDNS(),
		DNSZone:           dns.DefaultZone,
		LoginTokenTTL:     api.DefaultLoginTokenTTL,
		AutoscaleInterval: autoscale.DefaultInterval,
		SeriesInterval:    series.DefaultInterval,
		TokenUseInterval:  tokenuse.DefaultInterval,
		CATrustPeriod:     carotation.DefaultTrustPeriod,

		ServiceTemplates: templates.DefaultDir,
	}
}

// defaultDNS serves the zone on 127.0.0.1:8600 (as Consul does); bind a
// reachable address, or port 53, to serve others.
func defaultDNS() dns.Config {
	c := dns.DefaultConfig()
	c.Addr = "127.0.0.1:8600"
	return c
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir is empty"))
	}
	for name, a := range map[string]string{"api": c.APIAddr, "raft": c.RaftAddr, "gossip": c.GossipAddr} {
		if a == "" && name == "gossip" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("%s address %q: %w", name, a, err))
		}
	}
	if err := names.Validate("replica id", c.ReplicaID); err != nil {
		errs = append(errs, err)
	}
	if c.BootstrapExpect < 1 || c.BootstrapExpect > 9 {
		errs = append(errs, fmt.Errorf("bootstrap expect %d: want 1 to 9 replicas", c.BootstrapExpect))
	}
	if c.BootstrapExpect > 1 && len(c.Join) < c.BootstrapExpect-1 {
		errs = append(errs, fmt.Errorf("bootstrap expect %d needs the API addresses of the %d other replicas in --join", c.BootstrapExpect, c.BootstrapExpect-1))
	}
	for _, a := range c.Join {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs = append(errs, fmt.Errorf("join address %q: %w", a, err))
		}
	}
	if p, err := netip.ParsePrefix(c.GuestNetwork); err != nil || !p.Addr().Is4() {
		errs = append(errs, fmt.Errorf("guest network %q: want an IPv4 prefix such as %s", c.GuestNetwork, state.DefaultGuestNetwork))
	} else if c.NodeSubnetBits <= p.Bits() || c.NodeSubnetBits > 30 {
		errs = append(errs, fmt.Errorf("node subnet bits %d: want more than the guest network's %d and at most 30", c.NodeSubnetBits, p.Bits()))
	}
	if c.DNS.Addr != "" {
		if err := c.DNS.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("dns: %w", err))
		}
	}
	if c.CertTTL != 0 && c.CertTTL < 30*time.Second {
		errs = append(errs, fmt.Errorf("certificate ttl %s is below the minimum of 30s", c.CertTTL))
	}
	if c.LDAP.Enabled() {
		if err := c.LDAP.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.AutoscaleInterval < 100*time.Millisecond || c.AutoscaleInterval > 10*time.Minute {
		errs = append(errs, fmt.Errorf("autoscale interval %s: between 100ms and 10m", c.AutoscaleInterval))
	}
	if c.SeriesInterval < 100*time.Millisecond || c.SeriesInterval > 10*time.Minute {
		errs = append(errs, fmt.Errorf("series interval %s: between 100ms and 10m", c.SeriesInterval))
	}
	if c.CATrustPeriod < 0 || c.CATrustPeriod > 24*time.Hour {
		errs = append(errs, fmt.Errorf("CA trust period %s: between 0 and 24h", c.CATrustPeriod))
	}
	if c.TokenUseInterval < 100*time.Millisecond || c.TokenUseInterval > time.Hour {
		errs = append(errs, fmt.Errorf("token use interval %s: between 100ms and 1h", c.TokenUseInterval))
	}
	if c.LoginTokenTTL < time.Minute {
		errs = append(errs, fmt.Errorf("login token ttl %s is below the minimum of 1m", c.LoginTokenTTL))
	}
	if c.NodeTimeout < time.Second {
		errs = append(errs, fmt.Errorf("node timeout %s is below the minimum of 1s", c.NodeTimeout))
	}
	if c.RestoreFile != "" && c.BootstrapExpect > 1 {
		errs = append(errs, errors.New("a restore starts a group of one replica (--bootstrap-expect 1): the others join it afterwards"))
	}
	if err := c.Snapshots.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.RaftMultiplier < 0 || c.RaftMultiplier > 10 {
		errs = append(errs, fmt.Errorf("raft multiplier %d is outside 1 to 10", c.RaftMultiplier))
	}
	return errors.Join(errs...)
}

// Server is one running coordinator replica.
type Server struct {
	cfg      Config
	store    *state.Store
	replica  *replica
	listener net.Listener
	http     *http.Server
	logger   *slog.Logger
	liveness *liveness
	api      *api.Backend // the API's services
	series   *series.Sampler
	tokenMu  sync.Mutex
	opsToken string
	fwd      seenForwarder
	dns      *dns.Server       // nil when DNS is off
	zone     *dns.StaticSource // the zone the DNS server answers from
	gossip   atomic.Pointer[gossip.Member]
	certs    *certs
	// caRotator moves rotations of the cluster CA on (a leader loop).
	caRotator *carotation.Rotator
	peerHTTP  *http.Client // to other replicas
	sched     *scheduler.Metrics
	agentsMu  sync.Mutex
	agents    map[string]agentConn // by node id
	snaps     *snapshotschedule.Metrics

	// tokenUses records the last uses of the users' tokens this replica
	// served.
	tokenUses *tokenuse.Recorder
}

// agentConn is a client of one node's agent API.
type agentConn struct {
	addr   string
	http   *http.Client
	client corpusv1connect.NodeAgentServiceClient
}

// OpsTokenFile is the file in DataDir holding the bootstrap operator token.
const OpsTokenFile = "ops-token"

// New opens the replica's storage, joins or bootstraps Raft and binds the
// API listener. Serve starts answering.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("coordinator config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	cfg.Metrics = metrics.Registerer(cfg.Metrics)
	logger := cfg.Logger.With("component", "coordinator")
	var passwords api.PasswordChecker
	if cfg.LDAP.Enabled() {
		dir, err := ldapauth.New(cfg.LDAP)
		if err != nil {
			return nil, fmt.Errorf("coordinator config: %w", err)
		}
		passwords = dir
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data dir: %w", err)
	}
	s := &Server{cfg: cfg, store: state.NewStore(), logger: logger, fwd: seenForwarder{pending: map[string]bool{}}}
	s.liveness = newLiveness(cfg.NodeTimeout)
	s.agents = map[string]agentConn{}
	restore, err := openRestore(cfg, logger)
	if err != nil {
		return nil, err
	}
	alone := cfg.Bootstrap && cfg.BootstrapExpect <= 1
	certs, err := loadCerts(cfg, alone)
	if err != nil {
		return nil, err
	}
	s.certs = certs
	s.peerHTTP = rpc.HTTPClient(certs.peerClient())
	// A restored cluster keeps its operators' tokens: no new one.
	if (alone && cfg.RestoreFile == "") || fileExists(filepath.Join(cfg.DataDir, OpsTokenFile)) {
		tok, err := loadOrCreateToken(filepath.Join(cfg.DataDir, OpsTokenFile))
		if err != nil {
			return nil, err
		}
		s.opsToken = tok
	}
	r, err := openReplica(raftConfig{
		ID: cfg.ReplicaID, Dir: filepath.Join(cfg.DataDir, "raft"), BindAddr: cfg.RaftAddr,
		Bootstrap: alone, Restore: restore, Logger: cfg.Logger,
		SnapshotThreshold: cfg.RaftSnapshotThreshold, TrailingLogs: cfg.RaftTrailingLogs, Multiplier: cfg.RaftMultiplier,
		Certs: certs, Metrics: cfg.Metrics, Clock: cfg.Clock,
	}, s.store)
	if err != nil {
		return nil, err
	}
	s.replica = r
	ln, err := rpc.Listen(cfg.APIAddr)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("listening for the api on %s: %w", cfg.APIAddr, err)
	}
	s.listener = ln
	if err := s.startDNS(); err != nil {
		ln.Close()
		r.close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	s.series = series.NewSampler(series.SamplerConfig{State: s.store, Loads: agentLoads(s.agentClient), Interval: cfg.SeriesInterval, Logger: logger})
	s.tokenUses = &tokenuse.Recorder{Store: s.store, Propose: s.propose, Interval: cfg.TokenUseInterval, Clock: cfg.Clock, Logger: logger.With("component", "token_use")}
	s.api = &api.Backend{
		Clock:            cfg.Clock,
		Passwords:        passwords,
		LoginTTL:         cfg.LoginTokenTTL,
		Series:           s.series,
		Uses:             s.tokenUses,
		Extensions:       extensions.NewCaller(cfg.Metrics, certs.keys.Get),
		ServiceTemplates: cfg.ServiceTemplates,
		Store:            s.store,
		Proposer:         s,
		Leadership:       s,
		Agents:           s,
		Zones:            s,
		Group:            s,
		CA:               certs,
		CertTTL:          certs.ttl,
		Logger:           logger,
		Metrics:          api.NewMetrics(cfg.Metrics),
	}
	s.caRotator = &carotation.Rotator{Store: s.store, CA: certs, Ring: s.api.Keyring, Voters: s.voters, Propose: s.api.Write}
	s.api.CARotations = s.caRotator
	serve.Mount(mux, s.api)
	dash := ui.New(ui.Config{Store: s.store, API: mux, Dial: s.selfClient(certs)})
	dash.Mount(mux)
	s.sched = scheduler.NewMetrics(cfg.Metrics, s.store)
	var snapReg prometheus.Registerer
	if cfg.Snapshots.Dir != "" {
		snapReg = cfg.Metrics
	}
	s.snaps = snapshotschedule.NewMetrics(snapReg, cfg.Clock)
	cfg.Metrics.MustRegister(newGuestsCollector(s.store), newServicesCollector(s.store), pki.NewExpiryCollector("coordinator", func() map[string]*x509.Certificate {
		return map[string]*x509.Certificate{"cluster_ca": certs.Signer().Cert, "replica": certs.keys.Get().Leaf}
	}))
	s.http = rpc.NewServer(auth.PeerHTTP(dash.Credentials(mux)), certs.server())
	s.http.ErrorLog = rpc.ErrorLog(logger.With("component", "api"))
	return s, nil
}

// selfClient returns a client of this replica's own API, as a user (no
// certificate: the caller's token speaks), over loopback when the API
// listens on every address.
func (s *Server) selfClient(c *certs) func() (*http.Client, string) {
	client := rpc.HTTPClient(pki.TrustClientConfig(c.trust, nil, pki.RoleCoordinator, ""))
	return func() (*http.Client, string) {
		addr := s.listener.Addr().(*net.TCPAddr)
		host := addr.IP
		if host.IsUnspecified() {
			host = net.IPv6loopback
			if addr.IP.To4() != nil {
				host = net.IPv4(127, 0, 0, 1)
			}
		}
		return client, rpc.BaseURL(net.JoinHostPort(host.String(), strconv.Itoa(addr.Port)))
	}
}

// startDNS binds the DNS server over an initially empty zone.
func (s *Server) startDNS() error {
	if s.cfg.DNS.Addr == "" {
		return nil
	}
	empty, err := clusterZone(s.store.Read(), s.cfg.DNSZone, s.cfg.ReplicaID, nameServerAddr(s.cfg.DNS.Addr, s.cfg.RaftAddr))
	if err != nil {
		return fmt.Errorf("dns zone: %w", err)
	}
	s.zone = dns.NewStaticSource(empty)
	dcfg := s.cfg.DNS
	dcfg.Metrics = s.cfg.Metrics
	srv, err := dns.New(dcfg, s.zone, s.cfg.Logger)
	if err != nil {
		return fmt.Errorf("dns: %w", err)
	}
	if err := srv.Start(); err != nil {
		return fmt.Errorf("dns on %s: %w", s.cfg.DNS.Addr, err)
	}
	s.dns = srv
	return nil
}

// DNSAddr is the address the DNS server answers on ("" when off).
func (s *Server) DNSAddr() string {
	if s.dns == nil {
		return ""
	}
	return s.dns.UDPAddr().String()
}

// servedZone is the zone this replica's DNS server answers from.
func (s *Server) servedZone() *dns.Zone {
	if s.zone == nil {
		return nil
	}
	z, _ := s.zone.Snapshot()
	return z
}

// currentZone is the zone as of this replica's state now: the zone it
// serves when that is current, else one built from the state at once.
// zoneLoop rebuilds the served zone at most every zoneRebuildEvery, so
// under a stream of writes it may lag; an API answer must not (a
// linearizable ListRecords would otherwise miss a record it must show).
func (s *Server) currentZone() *dns.Zone {
	if s.zone == nil {
		return nil
	}
	z := s.servedZone()
	v := s.store.Read()
	if z != nil && z.Serial() == uint32(v.Index()) {
		return z
	}
	fresh, err := clusterZone(v, s.cfg.DNSZone, s.cfg.ReplicaID, nameServerAddr(s.DNSAddr(), s.cfg.RaftAddr))
	if err != nil {
		return z
	}
	return fresh
}

// APIAddr is the address the API listens on.
func (s *Server) APIAddr() string { return s.listener.Addr().String() }

// OpsToken is the bootstrap operator token ("" on a replica that did not
// bootstrap the cluster).
func (s *Server) OpsToken() string {
	s.tokenMu.Lock()
	defer s.tokenMu.Unlock()
	return s.opsToken
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Store gives read access to this replica's state.
func (s *Server) Store() *state.Store { return s.store }

// Snapshot forces a Raft snapshot now.
func (s *Server) Snapshot() error { return s.replica.snapshot() }

// Serve answers API calls and runs leader duties until ctx ends, then shuts
// down: in-flight calls see their context cancelled (ending Watch streams
// and blocking queries) and get a few seconds to answer, and Raft is
// closed cleanly.
func (s *Server) Serve(ctx context.Context) error {
	// Requests live no longer than the server. Otherwise Shutdown waits
	// for Watch streams, gives up, and leaves them running on a stopped
	// replica, where agents would never learn to look for another.
	// They end when the replica has handed over its leadership, with
	// rpc.ErrStopping as their cause: they answer Unavailable, and
	// clients ask another replica.
	lctx, cancelCause := context.WithCancelCause(context.WithoutCancel(ctx))
	cancel := func() { cancelCause(rpc.ErrStopping) }
	defer cancel()
	s.http.BaseContext = func(net.Listener) context.Context { return lctx }
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(lctx) }()
	}
	run(func(context.Context) {
		if err := rpc.Serve(s.http, s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serving api: %w", err)
		}
	})
	run(func(ctx context.Context) { s.leaderRunner().Run(ctx, s.replica.isLeader(), s.replica.leaderCh) })
	run(s.registerLoop)
	run(s.aliveLoop)
	run(s.forwardSeen)
	run(s.series.Run)
	run(s.tokenUses.Run)
	run(func(ctx context.Context) { s.certs.renewLoop(ctx, s.logger.With("component", "tls")) })
	run(s.caLoop)
	if s.cfg.Bootstrap && s.cfg.BootstrapExpect > 1 {
		run(s.formGroup)
	}
	if s.cfg.GossipAddr != "" {
		run(s.gossipLoop)
	}
	if s.dns != nil {
		// Every replica answers from its own copy of the state.
		wg.Add(1)
		go func() {
			defer wg.Done()
			zoneLoop(lctx, s.store, s.zone, s.cfg.DNSZone, s.cfg.ReplicaID,
				nameServerAddr(s.DNSAddr(), s.cfg.RaftAddr), s.logger.With("component", "dns"))
		}()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	// A leader that stops hands over first, so writes go on at once.
	if s.replica.isLeader() && s.inGroupOfMany() {
		if err := s.replica.raft.LeadershipTransfer().Error(); err != nil {
			s.logger.Warn("handing over leadership before stopping", "error", err)
		}
	}
	cancel()
	shctx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	s.http.Shutdown(shctx)
	if s.dns != nil {
		s.dns.Shutdown(shctx)
	}
	wg.Wait()
	if cerr := s.replica.close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing raft: %w", cerr)
	}
	return err
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, "{\"status\":\"ok\",\"leader\":%q,\"is_leader\":%t,\"index\":%d}\n",
		s.replica.leaderAddr(), s.replica.isLeader(), s.store.Read().Index())
}

func (s *Server) ensureBootstrapped(ctx context.Context) error {
	if s.store.Read().Config() != nil {
		return nil
	}
	if s.OpsToken() == "" {
		// In a group formed with --bootstrap-expect the replica with the
		// lowest id holds the token: let it lead.
		if id, addr, ok := s.bootstrapper(); ok && string(id) != s.cfg.ReplicaID {
			s.logger.Info("handing leadership to the replica holding the bootstrap token", "to", id)
			if err := s.replica.raft.LeadershipTransferToServer(id, addr).Error(); err != nil {
				return fmt.Errorf("handing leadership to %s: %w", id, err)
			}
			return errLeadershipHandedOver
		}
		return errors.New("cluster has no config and this replica holds no bootstrap token")
	}
	_, err := s.replica.propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_BootstrapCluster{BootstrapCluster: &corpusv1.BootstrapCluster{
		Config: &corpusv1.ClusterConfig{
			ClusterId:      secret.Hex(8),
			OpsTokenHash:   secret.Hash(s.OpsToken()),
			AgentKey:       secret.Hex(24),
			CoordinatorKey: secret.Hex(24),
			GuestNetwork:   s.cfg.GuestNetwork,
			NodeSubnetBits: int32(s.cfg.NodeSubnetBits),
		},
	}}})
	if errors.Is(err, state.ErrExists) {
		return nil
	}
	if err == nil {
		s.logger.Info("cluster bootstrapped")
	}
	return err
}

var errLeadershipHandedOver = errors.New("leadership handed over")

func loadOrCreateToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("token file %s is empty", path)
		}
		return tok, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading token file: %w", err)
	}
	tok := "cops_" + secret.Hex(24)
	if err := atomicfile.Write(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing token file: %w", err)
	}
	return tok, nil
}

// agentClient dials a node agent's API over mutual TLS: the agent must
// hold that node's certificate, and the replica presents its own (and
// the cluster's agent key). Clients are kept per node, so connections are
// reused; making one drops those of nodes removed since, and of a moved
// agent, closing their idle connections.
func (s *Server) agentClient(n *corpusv1.Node) corpusv1connect.NodeAgentServiceClient {
	s.agentsMu.Lock()
	defer s.agentsMu.Unlock()
	if c, ok := s.agents[n.Id]; ok && c.addr == n.AgentAddress {
		return c.client
	}
	view := s.store.Read()
	for id, c := range s.agents {
		if id == n.Id || view.Node(id) == nil {
			c.http.CloseIdleConnections()
			delete(s.agents, id)
		}
	}
	hc := rpc.HTTPClient(s.certs.agentClient(n.Id))
	c := corpusv1connect.NewNodeAgentServiceClient(hc, rpc.BaseURL(n.AgentAddress),
		connect.WithInterceptors(rpc.Bearer(view.Config().GetAgentKey()), api.AgentErrors(n)))
	s.agents[n.Id] = agentConn{addr: n.AgentAddress, http: hc, client: c}
	return c
}

// CACert is the cluster CA certificate (PEM), what clients trust.
func (s *Server) CACert() []byte { return s.certs.trust.PEM() }
