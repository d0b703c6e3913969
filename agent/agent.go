package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/cache"
	"corpus/drivers"
	"corpus/drivers/catalog"
	"corpus/internal/names"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
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
	// Drivers lists the drivers to run; default every built-in one.
	Drivers []string
	// ReportInterval is the period of status reports (and heartbeats).
	ReportInterval time.Duration
	// ResyncInterval is the period of full reconciles.
	ResyncInterval time.Duration
	// StopTimeout is how long a guest gets to shut down cleanly.
	StopTimeout time.Duration
	Logger      *slog.Logger
}

// Default returns the default agent configuration.
func Default() Config {
	return Config{
		StateDir:       "/var/lib/corpus/agent",
		Coordinators:   []string{"127.0.0.1:7400"},
		Name:           hostNodeName(),
		APIAddr:        "127.0.0.1:7402",
		Drivers:        catalog.Names(),
		ReportInterval: 5 * time.Second,
		ResyncInterval: 15 * time.Second,
		StopTimeout:    10 * time.Second,
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
	drivers  map[string]drivers.Driver
	listener net.Listener
	http     *http.Server
	id       cache.Identity
	client   corpusv1connect.AgentServiceClient

	mu       sync.Mutex
	desired  map[string]*corpusv1.Guest // by guest id
	known    bool                       // desired came from the coordinator or the cache
	workers  map[string]*worker         // by guest id
	observed map[string]*corpusv1.GuestObserved

	kick     chan struct{} // wakes the reconcile loop
	report   chan struct{} // asks for a status report soon
	workerWG sync.WaitGroup
}

// New opens the agent's state, builds its drivers and binds its API
// listener. Run enrolls (once) and starts working.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating state dir: %w", err)
	}
	c, err := cache.Open(filepath.Join(cfg.StateDir, "agent.db"))
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:      cfg,
		logger:   cfg.Logger.With("component", "agent"),
		cache:    c,
		drivers:  map[string]drivers.Driver{},
		desired:  map[string]*corpusv1.Guest{},
		workers:  map[string]*worker{},
		observed: map[string]*corpusv1.GuestObserved{},
		kick:     make(chan struct{}, 1),
		report:   make(chan struct{}, 1),
	}
	for _, name := range cfg.Drivers {
		d, err := catalog.New(name, catalog.Config{StateDir: cfg.StateDir, Logger: cfg.Logger})
		if err != nil {
			// A driver that cannot start is reported unhealthy, not fatal.
			a.logger.Warn("driver unavailable", "driver", name, "error", err)
			continue
		}
		a.drivers[name] = d
	}
	ln, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("listening for the agent api on %s: %w", cfg.APIAddr, err)
	}
	a.listener = ln
	return a, nil
}

// APIAddr is the address the agent's API listens on.
func (a *Agent) APIAddr() string { return a.listener.Addr().String() }

func (a *Agent) advertise() string {
	if a.cfg.AdvertiseAddr != "" {
		return a.cfg.AdvertiseAddr
	}
	return a.APIAddr()
}

// NodeID is the enrolled node's id ("" before enrollment).
func (a *Agent) NodeID() string { return a.id.NodeID }

// Run enrolls the agent if needed, then watches, reconciles and reports
// until ctx ends. Guests keep running when it returns.
func (a *Agent) Run(ctx context.Context) error {
	defer a.cache.Close()
	defer a.listener.Close()
	if err := a.enroll(ctx); err != nil {
		return err
	}
	a.client = corpusv1connect.NewAgentServiceClient(rpc.HTTPClient(), "http://"+a.id.Coordinator,
		connect.WithInterceptors(rpc.Bearer(rpc.NodeCredential(a.id.NodeID, a.id.NodeSecret))))
	if err := a.recoverJournal(ctx); err != nil {
		a.logger.Warn("recovering interrupted work", "error", err)
	}
	if idx, guests, ok, err := a.cache.Desired(); err != nil {
		a.logger.Warn("reading cached desired state", "error", err)
	} else if ok {
		a.logger.Info("loaded cached desired state", "index", idx, "guests", len(guests))
		a.setDesired(guests)
	}

	mux := http.NewServeMux()
	mountAPI(mux, a)
	a.http = rpc.NewServer(mux)
	var wg sync.WaitGroup
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	run(func(context.Context) {
		if err := a.http.Serve(a.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.logger.Error("agent api stopped", "error", err)
		}
	})
	run(a.watchLoop)
	run(a.reconcileLoop)
	run(a.reportLoop)
	a.logger.Info("agent running", "node", a.id.NodeName, "node_id", a.id.NodeID, "api", a.APIAddr(), "coordinator", a.id.Coordinator)
	<-ctx.Done()
	shctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	a.http.Shutdown(shctx)
	wg.Wait()
	a.workerWG.Wait()
	return nil
}

func (a *Agent) poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
