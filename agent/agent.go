package agent

import (
	"context"
	"corpus/agent/certs"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/agent/cache"
	"corpus/agent/deploy"
	"corpus/agent/guests"
	"corpus/agent/imagecache"
	"corpus/agent/instances"
	"corpus/agent/logs"
	"corpus/agent/network"
	"corpus/agent/registryauth"
	"corpus/agent/runtime"
	"corpus/agent/services"
	"corpus/agent/shell"
	"corpus/agent/sshd"
	"corpus/agent/volumes"
	"corpus/drivers"
	"corpus/drivers/catalog"
	imgcache "corpus/images/cache"
	"corpus/images/oci"
	"corpus/internal/gossip"
	"corpus/internal/metrics"
	"corpus/internal/names"
	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/sdnotify"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/volume"
)

// Config configures an agent.
type Config struct {
	// StateDir holds the agent's database and its drivers' files.
	StateDir string
	// Coordinators are API addresses (host:port) of coordinators.
	Coordinators []string
	// JoinToken enrolls the agent the first time it starts.
	JoinToken string
	// Name is the node name (a DNS label); default: the host name.
	Name string
	// Labels are node labels (region, zone, mode, ...).
	Labels map[string]string
	// APIAddr is where the agent's own API listens.
	APIAddr string
	// AdvertiseAddr is how coordinators reach the agent's API; default APIAddr.
	AdvertiseAddr string
	// Drivers lists the drivers to run; default every built-in one that
	// needs no configuration (catalog.Defaults).
	Drivers []string
	// Kubernetes configures the kubernetes driver, for an agent that
	// serves a cluster as its node.
	Kubernetes catalog.KubernetesConfig
	// ReportInterval is the period of status reports (and heartbeats).
	ReportInterval time.Duration
	// ResyncInterval is the period of full reconciles.
	ResyncInterval time.Duration
	// StopTimeout is how long a guest gets to shut down cleanly.
	StopTimeout time.Duration

	// Network turns on guest networking: the bridge, NAT and the proxy.
	Network bool
	// Bridge is the name of the bridge guests join.
	Bridge string
	// Address is where outside traffic reaches this node; default: the
	// host of AdvertiseAddr (or APIAddr).
	Address string
	// MinHostPort is the lowest node port guests may publish.
	MinHostPort int
	// ProxyHTTPAddr and ProxyHTTPSAddr are the proxy's listen addresses
	// (HTTPS off when empty); ProxyCerts are "CERT.pem:KEY.pem" pairs.
	ProxyHTTPAddr  string
	ProxyHTTPSAddr string
	ProxyCerts     []string
	// ProxyProcess runs the proxy as a process of its own (`corpus
	// proxy`, netns/proxy/proxyd) that outlives the agent: restarts and
	// upgrades of the agent leave ingress serving. Off, the proxy runs
	// in the agent. ProxyBinary is the corpus binary that runs it
	// (default: this one).
	ProxyProcess bool
	ProxyBinary  string
	// ProxyMetrics, when set, is given the proxy process's metrics, for
	// the agent's endpoint.
	ProxyMetrics func(prometheus.Gatherer)
	// GitAddr is the SSH git endpoint's listen address (off when empty);
	// GitMaxPushBytes bounds one push's pack.
	GitAddr         string
	GitMaxPushBytes int64
	// SupervisorBinary is corpus-supervisor, which the agent installs in
	// guests that run processes (default: beside this binary, or where
	// the package puts it).
	SupervisorBinary string
	// LogMaxBytes caps each guest's log on the node (agent/logs; 0: 32
	// MiB); LogRetention drops lines older (0: 7 days).
	LogMaxBytes  int64
	LogRetention time.Duration
	// LogShip sends the guests' log lines on as they are stored
	// (agent/logs: a syslog receiver and/or a JSON lines file).
	LogShip logs.ShipConfig
	// ImageCacheMax caps the node's image cache (drivers that keep one):
	// a size ("20G"), a share of the disk holding it ("25%"), or "0" for
	// none; empty is the driver's default. Past it, the images no guest
	// uses go, least recently used first, after each pull or build.
	ImageCacheMax string
	// Shells bounds interactive sessions (agent/shell; zero: defaults).
	Shells shell.Limits
	// GossipAddr is where the node's gossip member listens (UDP and TCP);
	// coordinators probe it to notice within seconds that the node is
	// gone. It is advertised with the host of AdvertiseAddr (or APIAddr).
	// Off when empty: heartbeats alone then keep the node alive.
	GossipAddr string
	Logger     *slog.Logger
	// Metrics receives the component's Prometheus metrics; nil keeps
	// them unserved.
	Metrics prometheus.Registerer
	// Heart, when set, beats each time the reconcile loop goes round, for
	// the service manager's readiness (the first pass after enrolment)
	// and watchdog (see internal/sdnotify).
	Heart *sdnotify.Heart
}

// Default returns the default agent configuration.
func Default() Config {
	return Config{
		StateDir:       "/var/lib/corpus/agent",
		Coordinators:   []string{"127.0.0.1:7400"},
		Name:           hostNodeName(),
		APIAddr:        "127.0.0.1:7402",
		Drivers:        catalog.Defaults(),
		Kubernetes:     catalog.KubernetesConfig{NamespacePrefix: "corpus-"},
		ReportInterval: 5 * time.Second,
		ResyncInterval: 15 * time.Second,
		StopTimeout:    10 * time.Second,
		Network:        true,
		Bridge:         "corpus0",
		MinHostPort:    1024,
		ProxyHTTPAddr:  ":80",

		GitAddr:         ":2222",
		GitMaxPushBytes: 256 << 20,
		GossipAddr:      ":7404",
	}
}

// hostNodeName derives a valid node name from the host name: the first
// label, lowercased, other characters replaced by '-'.
func hostNodeName() string {
	host, _ := os.Hostname()
	b := []byte(strings.ToLower(strings.Split(host, ".")[0]))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	name := strings.Trim(string(b), "-")
	if names.Validate("node", name) != nil {
		return "node-1"
	}
	return name
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.StateDir == "" {
		errs = append(errs, errors.New("state dir is empty"))
	}
	if len(c.Coordinators) == 0 {
		errs = append(errs, errors.New("no coordinator address given"))
	}
	if err := names.Validate("node", c.Name); err != nil {
		errs = append(errs, fmt.Errorf("%w (set --name)", err))
	}
	if _, _, err := net.SplitHostPort(c.APIAddr); err != nil {
		errs = append(errs, fmt.Errorf("api address %q: %w", c.APIAddr, err))
	}
	if c.Network {
		if l := len(c.Bridge); l == 0 || l > 15 {
			errs = append(errs, fmt.Errorf("bridge name %q: 1 to 15 characters", c.Bridge))
		}
		if c.MinHostPort < 1 || c.MinHostPort > 65535 {
			errs = append(errs, fmt.Errorf("min host port %d is not a port", c.MinHostPort))
		}
		if c.Address != "" {
			if _, err := netip.ParseAddr(c.Address); err != nil {
				errs = append(errs, fmt.Errorf("node address %q: %w", c.Address, err))
			}
		}
	}
	if c.ImageCacheMax != "" {
		if _, _, err := imgcache.ParseLimit(c.ImageCacheMax); err != nil {
			errs = append(errs, fmt.Errorf("%w (--image-cache-max)", err))
		}
	}
	if c.GitAddr != "" {
		if _, _, err := net.SplitHostPort(c.GitAddr); err != nil {
			errs = append(errs, fmt.Errorf("git address %q: %w", c.GitAddr, err))
		}
		if c.GitMaxPushBytes < 1<<10 {
			errs = append(errs, fmt.Errorf("git max push bytes %d is under 1 KiB", c.GitMaxPushBytes))
		}
	}
	if c.GossipAddr != "" {
		if _, _, err := net.SplitHostPort(c.GossipAddr); err != nil {
			errs = append(errs, fmt.Errorf("gossip address %q: %w", c.GossipAddr, err))
		}
	}
	if c.ReportInterval <= 0 || c.ResyncInterval <= 0 || c.StopTimeout <= 0 {
		errs = append(errs, errors.New("intervals and timeouts must be positive"))
	}
	return errors.Join(errs...)
}

// Agent is a running node agent.
type Agent struct {
	cfg      Config
	logger   *slog.Logger
	cache    *cache.Cache
	runtime  *runtime.Runtime // the guests' process supervisors
	logs     *logs.Store      // the guests' logs on this node
	shipper  *logs.Shipper    // nil unless LogShip names a target
	sessions shell.Sessions   // interactive sessions and commands in guests
	drivers  map[string]drivers.Driver
	listener net.Listener
	http     *http.Server
	keys     *pki.Keys        // the node's certificate, renewed in place
	trust    *pki.Trust       // the cluster CAs trusted
	renewNow chan struct{}    // asks renewLoop for a renewal now
	net      *network.Network // nil when networking is off
	routeSet *network.Routes  // publishes routes through drivers, finds the proxy's targets
	vols     *volumes.Manager
	guests   *guests.Config // what the guests' workers share
	id       cache.Identity
	coords   *coordinators
	deploys  *deploy.Pipeline // releases of the projects whose guests are here
	services services.Node    // the services whose guests are here, the backups it keeps
	ssh      *sshd.Server     // nil when the git endpoint is off
	gossip   *gossip.Member   // nil when gossip is off
	runCtx   context.Context
	metrics  *agentMetrics
	tlsCerts atomic.Pointer[nodeCerts] // set once enrolled
	keychain *registryauth.Keychain    // registries' credentials, asked per pull
	images   *oci.Store                // the node's OCI layer store

	mu      sync.Mutex
	desired map[string]*corpusv1.Guest // by guest id
	node    *corpusv1.Node             // this node as the coordinator last said
	routes  []*corpusv1.Route          // proxy routes to this node's guests
	// certificates are those of the https domains of routes; tls keeps
	// their keys for the proxy.
	httpsCerts []*corpusv1.Certificate
	tls        *certs.Cache
	// guestProjects names the project of the guests that run one;
	// guestServices the service of those that run one, serviceReach
	// who may reach them.
	guestProjects map[string]string
	// instances are the project instances past the first among the
	// guests; instSync keeps them serving (agent/instances).
	instances     []*corpusv1.InstanceAssignment
	instSync      *instances.Syncer
	guestServices map[string]string
	serviceReach  map[string]*corpusv1.ServiceReach
	// guestWaiting are the guests not to start yet, and why (the
	// services their project links are not healthy).
	guestWaiting map[string]string
	// peers are the other nodes' guest subnets, routed to them.
	peers []*corpusv1.PeerNode
	// heldBackups are the backups the state says this node keeps (nil
	// until the coordinator said).
	heldBackups []*corpusv1.Backup
	cdns        network.ClusterDNS // where the cluster zone is answered
	// gossipPeer is the coordinator's gossip member, as the watch said.
	gossipPeer string
	// rewatch ends the current watch stream so a fresh one starts.
	rewatch context.CancelFunc

	known    bool                      // desired came from the coordinator or the cache
	orphans  map[string]string         // guests a restored cluster does not know (orphans.go)
	restore  string                    // id of the cluster's last restore the watch said
	index    uint64                    // the state index of desired (watch.go: staleDesired)
	workers  map[string]*guests.Worker // by guest id
	observed map[string]*corpusv1.GuestObserved

	kick       chan struct{} // wakes the reconcile loop
	report     chan struct{} // asks for a status report soon
	gossipKick chan struct{} // asks the gossip member to join again
	workerWG   sync.WaitGroup
}

// Parts are what an agent runs on, built by its caller (the daemon
// builds the real ones from the driver catalog, the loop volume backend
// and agent/network).
type Parts struct {
	// Drivers are the running drivers by name; a driver cfg.Drivers
	// names that is missing here is reported unhealthy.
	Drivers map[string]drivers.Driver
	// Volumes keeps volumes on the host; nil when they cannot run here.
	Volumes volume.Backend
	// Network is the node's guest networking and proxy; nil when off.
	Network *network.Network
	// Keychain gives pulls the credentials of registries; the agent
	// points it at its coordinators once enrolled. The drivers that pull
	// share it; nil makes the agent one for its own pulls (deploys).
	Keychain *registryauth.Keychain
	// Images is the node's OCI layer store, which the drivers that pull
	// share with the deploys from images; nil makes the agent one (at
	// the same place) for its deploys.
	Images *oci.Store
}

// New opens the agent's state and binds its API listener; it runs on
// parts. Run enrolls (once) and starts working.
func New(cfg Config, parts Parts) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if parts.Drivers == nil {
		parts.Drivers = map[string]drivers.Driver{}
	}
	cfg.Metrics = metrics.Registerer(cfg.Metrics)
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating state dir: %w", err)
	}
	// A bad shipping target is refused before anything opens.
	var shipper *logs.Shipper
	var self *Agent
	if cfg.LogShip.Syslog != "" || cfg.LogShip.File != "" {
		ship := cfg.LogShip
		ship.Node, ship.Logger = cfg.Name, cfg.Logger.With("component", "logship")
		ship.Names = func(id string) (string, string) { return self.guestNames(id) }
		var err error
		if shipper, err = logs.NewShipper(ship); err != nil {
			return nil, err
		}
	}
	c, err := cache.Open(filepath.Join(cfg.StateDir, "agent.db"))
	if err != nil {
		return nil, err
	}
	if cfg.SupervisorBinary == "" {
		cfg.SupervisorBinary = runtime.FindBinary()
	}
	logStore, err := logs.Open(logs.Config{Dir: filepath.Join(cfg.StateDir, "logs"), MaxBytes: cfg.LogMaxBytes,
		Retention: cfg.LogRetention, Logger: cfg.Logger.With("component", "logs")})
	if err != nil {
		c.Close()
		return nil, err
	}
	a := &Agent{
		cfg:        cfg,
		logger:     cfg.Logger.With("component", "agent"),
		cache:      c,
		runtime:    &runtime.Runtime{Binary: cfg.SupervisorBinary},
		logs:       logStore,
		drivers:    parts.Drivers,
		net:        parts.Network,
		keychain:   parts.Keychain,
		desired:    map[string]*corpusv1.Guest{},
		workers:    map[string]*guests.Worker{},
		observed:   map[string]*corpusv1.GuestObserved{},
		kick:       make(chan struct{}, 1),
		report:     make(chan struct{}, 1),
		gossipKick: make(chan struct{}, 1),
		renewNow:   make(chan struct{}, 1),
		metrics:    newAgentMetrics(cfg.Metrics),
	}
	if a.keychain == nil {
		a.keychain = &registryauth.Keychain{Log: a.logger}
	}
	if a.images = parts.Images; a.images == nil {
		a.images = catalog.ImageStore(cfg.StateDir, a.keychain, a.logger.With("component", "images"))
	}
	// Deploys from images had a store of their own before it was the
	// node's one.
	os.RemoveAll(filepath.Join(cfg.StateDir, "images", "oci"))
	a.tls = certs.New(a.fetchTLS)
	a.guests = &guests.Config{Drivers: a.drivers, Journal: c, StopTimeout: cfg.StopTimeout, Node: host{a}, Logger: a.logger,
		Reconciled: func(g *corpusv1.Guest, took time.Duration, err error) {
			a.metrics.reconciled(a.driverLabel(g), took, err)
		}}
	if a.net != nil {
		a.guests.Network = a.guestNetwork
	}
	a.sessions = shell.Sessions{Shells: shell.New(cfg.Shells), Guests: host{a}, Runtime: a.runtime, Node: func() string { return a.id.NodeName }}
	if shipper != nil {
		self, a.shipper = a, shipper
		a.logs.ShipTo(shipper)
	}
	a.vols = volumes.New(volumes.Config{StateDir: cfg.StateDir, Backend: parts.Volumes, Drivers: a.drivers, Order: cfg.Drivers,
		Node:   func() (string, string) { return a.id.NodeID, a.id.NodeName },
		Guest:  a.desiredGuest,
		Kick:   func() { a.poke(a.kick) },
		Report: func() { a.poke(a.report) },
		Logger: a.logger})
	a.guests.Volumes = a.vols
	ln, err := rpc.Listen(cfg.APIAddr)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("listening for the agent api on %s: %w", cfg.APIAddr, err)
	}
	a.listener = ln
	a.routeSet = network.NewRoutes(a.drivers, a.logger)
	if a.deploys, err = a.newDeploys(); err != nil {
		ln.Close()
		c.Close()
		return nil, err
	}
	a.instSync = instances.New(a.deploys.SyncInstance, func() { a.poke(a.kick) }, func() { a.poke(a.report) }, a.logger)
	a.services = services.Node{Volumes: a.vols, Logger: a.logger}
	a.services.Services, a.services.Backups, err = services.Open(cfg.StateDir,
		services.Config{Runtime: a.runtime, Logger: a.logger.With("component", "services")}, host{a})
	if err != nil {
		ln.Close()
		c.Close()
		return nil, err
	}
	if cfg.GitAddr != "" {
		if a.ssh, err = sshd.New(sshd.Config{StateDir: cfg.StateDir, Addr: cfg.GitAddr, Host: host{a}, Shells: a.sessions.Shells, Logger: a.logger}); err != nil {
			ln.Close()
			c.Close()
			return nil, err
		}
	}
	// Read at scrape time: registered once what they read is in place.
	cfg.Metrics.MustRegister(volumes.Collector(a.vols), pki.NewExpiryCollector("agent", a.certificates),
		imagecache.Collector(imagecache.Images{Drivers: a.drivers}))
	return a, nil
}

// address is where outside traffic reaches this node.
func (a *Agent) address() string {
	if a.cfg.Address != "" {
		return a.cfg.Address
	}
	host, _ := rpc.SpecificHost(a.advertise())
	return host
}

// APIAddr is the address the agent's API listens on.
func (a *Agent) APIAddr() string { return a.listener.Addr().String() }

func (a *Agent) advertise() string {
	if a.cfg.AdvertiseAddr != "" {
		return a.cfg.AdvertiseAddr
	}
	return a.APIAddr()
}

// coordinator is the coordinator address the agent talks to now.
func (a *Agent) coordinator() string {
	addr, _ := a.coords.current()
	return addr
}

// ProxyAddr is the proxy's HTTP listen address ("" without networking).
func (a *Agent) ProxyAddr() string {
	if a.net == nil {
		return ""
	}
	return a.net.Proxy().HTTPAddr().String()
}

// RemoveNetwork removes the node's bridge, layer-2 filter and NAT rules
// and stops its proxy process (for `corpus dev --cleanup` and
// uninstall). Guests still attached lose their network.
func (a *Agent) RemoveNetwork(ctx context.Context) error {
	if a.net == nil {
		return nil
	}
	return a.net.Remove(ctx)
}

// NodeID is the enrolled node's id ("" before enrollment).
func (a *Agent) NodeID() string { return a.id.NodeID }

// Run enrolls the agent if needed, then watches, reconciles and reports
// until ctx ends. Guests keep running when it returns.
func (a *Agent) Run(ctx context.Context) error {
	defer a.cache.Close()
	defer a.logs.Close()
	defer a.listener.Close()
	a.runCtx = ctx
	if err := a.enroll(ctx); err != nil {
		return err
	}
	keys, trust, err := a.tlsKeys()
	if err != nil {
		return err
	}
	a.keys, a.trust = keys, trust
	a.tlsCerts.Store(&nodeCerts{keys: keys, ca: pki.IssuerOf(keys.Get().Leaf, trust.Certs())})
	a.coords = newCoordinators(coordinatorList(a.cfg.Coordinators, a.id.Coordinator), a.coordinatorHTTP())
	a.keychain.Use(a.registryCredentials)
	if err := a.guests.RecoverJournal(ctx); err != nil {
		a.logger.Warn("recovering interrupted work", "error", err)
	}
	a.loadOrphans()
	if msg, ok, err := a.cache.Desired(); err != nil {
		a.logger.Warn("reading cached desired state", "error", err)
	} else if ok {
		a.logger.Info("loaded cached desired state", "index", msg.Index, "guests", len(msg.Guests), "routes", len(msg.Routes))
		a.setDesired(msg)
	}

	mux := http.NewServeMux()
	mountAPI(mux, a)
	// Only coordinators of this cluster, with their certificates, call
	// the agent's API.
	sc := pki.TrustServerConfig(trust, keys, true)
	sc.VerifyConnection = func(cs tls.ConnectionState) error {
		if id, ok := pki.PeerIdentity(&cs); !ok || id.Role != pki.RoleCoordinator {
			return errors.New("only coordinators may call the agent")
		}
		return nil
	}
	a.http = rpc.NewServer(mux, sc)
	a.http.ErrorLog = rpc.ErrorLog(a.logger.With("component", "agent_api"))
	var wg sync.WaitGroup
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	run(func(context.Context) {
		if err := rpc.Serve(a.http, a.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.logger.Error("agent api stopped", "error", err)
		}
	})
	if a.net != nil {
		run(func(ctx context.Context) {
			if err := a.net.Proxy().Run(ctx); err != nil {
				a.logger.Error("proxy stopped", "error", err)
			}
		})
	}
	if a.ssh != nil {
		run(a.ssh.Serve)
	}
	a.startGossip()
	run(a.deploys.Run)
	run(a.reviveLoop)
	run(func(ctx context.Context) { a.logs.Keep(ctx, host{a}.logTargets, a.runtime) })
	if a.shipper != nil {
		run(a.shipper.Run)
	}
	run(a.gossipLoop)
	run(a.watchLoop)
	run(a.reconcileLoop)
	run(a.reportLoop)
	run(a.renewLoop)
	a.logger.Info("agent running", "node", a.id.NodeName, "node_id", a.id.NodeID, "api", a.APIAddr(), "coordinator", a.coordinator())
	<-ctx.Done()
	shctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	a.http.Shutdown(shctx)
	wg.Wait()
	a.workerWG.Wait()
	if a.net != nil {
		a.net.Shutdown(shctx)
	}
	return nil
}

// newDeploys builds the agent's deploy pipeline, once its cache, runtime,
// logs, drivers and network are in place.
func (a *Agent) newDeploys() (*deploy.Pipeline, error) {
	cfg := deploy.Config{
		MaxPushBytes: a.cfg.GitMaxPushBytes,
		Cache:        a.cache,
		Runtime:      a.runtime,
		Logs:         a.logs,
		Metrics:      a.cfg.Metrics,
		Logger:       a.logger,
		// Releases from images: the node's layer store, layers checked
		// by digest, the trees unpacked for a deploy's time.
		Images:   a.images,
		ImageDir: filepath.Join(a.cfg.StateDir, "images", "unpack"),
	}
	if a.cfg.GitAddr != "" {
		cfg.GitDir = filepath.Join(a.cfg.StateDir, "git")
	}
	if a.net != nil {
		cfg.Proxy = a.net.Proxy()
	}
	return deploy.New(cfg, host{a})
}

// desiredGuest is the guest of that id as last told, or nil.
func (a *Agent) desiredGuest(id string) *corpusv1.Guest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.desired[id]
}

func (a *Agent) poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
