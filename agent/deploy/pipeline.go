package deploy

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"corpus/agent/cache"
	"corpus/agent/deploy/envlock"
	"corpus/agent/deploy/githook"
	"corpus/agent/deploy/imagetree"
	"corpus/agent/logs"
	"corpus/agent/runtime"
	"corpus/drivers"
	"corpus/internal/atomicfile"
	"corpus/internal/keylock"
	"corpus/netns/proxy"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Agent is what the pipeline needs of the node agent it runs in, besides
// the components Config hands over. Its methods are safe for concurrent
// use.
type Agent interface {
	// Guest returns the guest of that name this node runs and its driver:
	// a nil guest when there is none, a nil driver when this node does
	// not have the guest's driver. The guest is the agent's: the
	// pipeline reads it and never changes it.
	Guest(name string) (*corpusv1.Guest, drivers.Driver)
	// DesiredKnown reports whether the desired state came from the
	// coordinator or the agent's cache: until then a guest that Guest
	// does not find may yet be on this node.
	DesiredKnown() bool
	// CallCoordinator runs f against the coordinator the agent talks to
	// now and, when that one gave no answer, once more against the next;
	// it returns f's last error.
	CallCoordinator(f func(corpusv1connect.AgentServiceClient) error) error
}

// Ingress is what a deploy asks the node's proxy: its routes, and how
// many requests a target still serves.
type Ingress interface {
	Routes() proxy.Routes
	InFlight(target string) int64
}

// Config is what a Pipeline is built from. The components are the
// agent's, shared: the pipeline uses them and closes none.
type Config struct {
	// GitDir holds the bare repositories pushes go to and the socket
	// their pre-receive hook reaches the pipeline on; empty when the
	// node's git endpoint is off (a config change or a restart still
	// runs, a redeploy from the repository does not).
	GitDir string
	// MaxPushBytes bounds one push's pack (the tree may hold four times
	// as much).
	MaxPushBytes int64
	// Cache keeps the deploy journal: a crash mid-deploy is resolved on
	// the next start (see Run).
	Cache *cache.Cache
	// Runtime runs the releases' processes in the guests.
	Runtime *runtime.Runtime
	// Logs stores what deploys say in the guest's log (nil: nowhere).
	Logs *logs.Store
	// Proxy is this node's proxy, watched while web moves to its new port
	// (nil when the node runs none).
	Proxy Ingress
	// Images is the node's image store releases from an image are
	// pulled into (nil: the node deploys no images), and ImageDir the
	// folder, root's alone, they are unpacked in for the time of a
	// deploy.
	Images   imagetree.Images
	ImageDir string
	// Metrics receives the deploy metrics (required).
	Metrics prometheus.Registerer
	// Logger says what the pipeline does besides a deploy's own output
	// (git access, recovered deploys).
	Logger *slog.Logger
}

// Pipeline runs the deploys, restarts and rollbacks of the project
// environments whose guests are on this node.
type Pipeline struct {
	agent   Agent
	cache   *cache.Cache
	runtime *runtime.Runtime
	logs    *logs.Store
	proxy   Ingress
	logger  *slog.Logger
	metrics *deployMetrics
	// maxPushBytes bounds a push's pack; its tree may hold four times
	// as much.
	maxPushBytes int64
	git          *gitServer       // nil when the git endpoint is off
	images       imagetree.Images // nil when the node deploys no images
	imageDir     string
	envLocks     envlock.Locks
	// sources are the pushes deploying now (ReleaseSource reads them);
	// fetches serializes fetching them into a repository.
	sources sources
	fetches keylock.Map
	// left are the webs instance switches moved the routes from.
	left leftWebs
}

// New builds the pipeline: with cfg.GitDir, it makes that folder and
// binds the hook socket in it. Run serves it.
func New(cfg Config, agent Agent) (*Pipeline, error) {
	p := &Pipeline{
		agent:        agent,
		cache:        cfg.Cache,
		runtime:      cfg.Runtime,
		logs:         cfg.Logs,
		proxy:        cfg.Proxy,
		logger:       cfg.Logger,
		maxPushBytes: cfg.MaxPushBytes,
		metrics:      newMetrics(cfg.Metrics),
		images:       cfg.Images,
		imageDir:     cfg.ImageDir,
	}
	// Unpacked images live for a deploy's time: what is there now, a
	// deploy cut short by the agent's end left.
	if cfg.ImageDir != "" {
		if err := os.RemoveAll(cfg.ImageDir); err != nil {
			return nil, fmt.Errorf("removing the images deploys left unpacked: %w", err)
		}
	}
	if cfg.GitDir != "" {
		if err := os.MkdirAll(cfg.GitDir, 0o700); err != nil {
			return nil, err
		}
		s := &gitServer{p: p, root: cfg.GitDir, sessions: map[string]*pushSession{}}
		// One pre-receive hook for every repository, written before any
		// push: rewritten per push, a git exec of it could meet a
		// process forked meanwhile still holding it open for writing
		// ("Text file busy").
		if err := atomicfile.Write(s.hookPath(), []byte(preReceiveHook), 0o755); err != nil {
			return nil, err
		}
		hooks, err := githook.Listen(filepath.Join(cfg.GitDir, "hook.sock"))
		if err != nil {
			return nil, err
		}
		s.hooks = hooks
		p.git = s
	}
	return p, nil
}

// Run serves the pushes' hooks until ctx ends, and resolves the deploys
// and rollbacks a crash interrupted (see recoverDeploys). Deploys started
// by a push run under ctx.
func (p *Pipeline) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if p.git != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.git.hooks.Serve(ctx, p.git.handleHook)
		}()
	}
	p.recoverDeploys(ctx)
	wg.Wait()
}

// guestForExec finds a guest of this node whose driver can exec.
func (p *Pipeline) guestForExec(name string) (*corpusv1.Guest, drivers.Driver, error) {
	g, d := p.agent.Guest(name)
	if g == nil {
		return nil, nil, fmt.Errorf("guest %s is not on this node", name)
	}
	if d == nil || !d.Capabilities().Exec {
		return nil, nil, fmt.Errorf("guest %s: driver %s cannot run commands in it", name, g.Spec.GetDriver())
	}
	return g, d, nil
}

// coordCall runs f against the coordinator, failing over as every call of
// the agent does (Agent.CallCoordinator).
func coordCall[T any](p *Pipeline, f func(corpusv1connect.AgentServiceClient) (*connect.Response[T], error)) (*T, error) {
	var msg *T
	err := p.agent.CallCoordinator(func(c corpusv1connect.AgentServiceClient) error {
		res, err := f(c)
		if err == nil {
			msg = res.Msg
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return msg, nil
}
