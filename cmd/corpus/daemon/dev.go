package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"corpus/agent"
	"corpus/agent/cache"
	"corpus/client"
	"corpus/cmd/corpus/cli"
	"corpus/coordinator"
	"corpus/internal/metrics"
	"corpus/internal/statelock"
	corpusv1 "corpus/proto/corpus/v1"
)

// devOptions configure `corpus dev`.
type devOptions struct {
	stateDir  string
	apiAddr   string
	raftAddr  string
	agentAddr string
	dnsAddr   string
	metrics   metricsFlags
	name      string
	envName   string
	cleanup   bool
	agent     agent.Config // network settings
	logs      logFlags
}

func newDevCmd(g *cli.Globals) *cobra.Command {
	o := devOptions{
		stateDir:  "/var/lib/corpus/dev",
		apiAddr:   "127.0.0.1:7400",
		raftAddr:  "127.0.0.1:7401",
		agentAddr: "127.0.0.1:7402",
		dnsAddr:   coordinator.Default().DNS.Addr,
		metrics:   metricsFlags{addr: defaultCoordinatorMetricsAddr},
		envName:   "dev",
		agent:     agent.Default(),
	}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a one-machine cluster: a coordinator and an agent on this host",
		Long: `dev runs a one-replica coordinator and a node agent in one process, with all
data under --state-dir, enrolls this host as a node, and records the cluster
as the "dev" environment of the CLI config so client commands work at once.
Ctrl-C stops it; guests keep running unless --cleanup is given, which
deletes them, their volumes and the node's network first and exits non-zero
when something is left. Running it again picks up the same cluster; a
second one on a --state-dir in use is refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.name == "" {
				o.name = agent.Default().Name
			}
			logger, err := o.logs.logger()
			if err != nil {
				return err
			}
			release, err := lockDevState(o.stateDir)
			if err != nil {
				return err
			}
			defer release()
			if err := privateDir(o.stateDir); err != nil {
				return err
			}
			// One registry holds the coordinator's and the agent's
			// metrics: one process, one scrape target.
			reg := metrics.NewRegistry()
			proxyMetrics := &metrics.Deferred{} // the proxy process's
			o.agent.ProxyMetrics = proxyMetrics.Set
			return withMetrics(cmd.Context(), o.metrics, prometheus.Gatherers{reg, proxyMetrics}, logger, func(ctx context.Context, url string) error {
				return runDev(ctx, g, o, logger, reg, url)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.stateDir, "state-dir", o.stateDir, "folder for all of the cluster's data")
	f.StringVar(&o.apiAddr, "api-addr", o.apiAddr, "coordinator API listen address")
	f.StringVar(&o.raftAddr, "raft-addr", o.raftAddr, "Raft listen address")
	f.StringVar(&o.agentAddr, "agent-addr", o.agentAddr, "agent API listen address")
	f.StringVar(&o.dnsAddr, "dns-addr", o.dnsAddr, "DNS listen address (empty: off)")
	o.metrics.add(f, "Prometheus metrics listen address of the coordinator and the agent, on /metrics (empty: off)")
	f.StringVar(&o.name, "name", "", "name of this node (default: this host's name)")
	f.StringVar(&o.envName, "env-name", o.envName, "name of the environment written to the CLI config")
	f.BoolVar(&o.cleanup, "cleanup", false, "on exit, delete every guest and volume of this node, then its network (exit 1 when something is left)")
	addNetworkFlags(f, &o.agent)
	o.logs.add(f)
	return cmd
}

// lockDevState locks the state folder of `corpus dev`: the whole folder
// first, so a second `corpus dev` is told of it; then each daemon's own,
// as `corpus coordinator` and `corpus agent` would take them, before
// anything opens a database or a port. release unlocks them all.
func lockDevState(stateDir string) (release func(), err error) {
	var locks []*statelock.Lock
	release = func() {
		for i := len(locks) - 1; i >= 0; i-- {
			locks[i].Release()
		}
	}
	for _, dir := range []string{stateDir, filepath.Join(stateDir, "coordinator"), filepath.Join(stateDir, "agent")} {
		lock, err := statelock.Acquire(dir)
		if err != nil {
			release()
			return nil, err
		}
		locks = append(locks, lock)
	}
	return release, nil
}

// privateDir keeps other users out of dir: it may not be read or written
// by its group or others. Search (x) stays where it was given: the lxc
// driver grants it on the path to unprivileged guests' root file systems.
func privateDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); perm&0o066 != 0 {
		if err := os.Chmod(dir, perm&^0o066); err != nil {
			return fmt.Errorf("keeping other users out of %s: %w", dir, err)
		}
	}
	return nil
}

// runDev runs the cluster of `corpus dev` on its locked state folder. A
// stop (ctx ending) in any phase, startup included, stops what runs and
// returns nil; a phase that fails stops what runs and says why.
func runDev(ctx context.Context, g *cli.Globals, o devOptions, logger *slog.Logger, reg prometheus.Registerer, metricsURL string) error {
	ccfg := coordinator.Default()
	ccfg.DataDir = filepath.Join(o.stateDir, "coordinator")
	agentDir := filepath.Join(o.stateDir, "agent")
	ccfg.APIAddr, ccfg.RaftAddr = o.apiAddr, o.raftAddr
	ccfg.DNS.Addr = o.dnsAddr
	ccfg.Logger = logger
	// Ready once both have gone round; the watchdog wants both alive.
	n := notifier(ctx, logger)
	ccfg.Heart = n.Heart("coordinator")
	agentHeart := n.Heart("agent")
	ccfg.Metrics = reg
	srv, err := coordinator.New(ccfg)
	if err != nil {
		return err
	}
	// On every return: the agent is stopped, then the coordinator, then
	// both are waited for.
	var wg sync.WaitGroup
	defer wg.Wait()
	cctx, stopCoordinator := context.WithCancel(context.Background())
	defer stopCoordinator()
	cerr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		cerr <- srv.Serve(cctx)
	}()
	// A phase that ends early because of a stop is no failure.
	// With --cleanup it is: nothing was cleaned up.
	stopped := func(err error) error {
		if ctx.Err() == nil {
			return err
		}
		logger.Info("stopped while starting")
		if o.cleanup {
			return errors.New("stopped while starting, before its agent ran: nothing was cleaned up")
		}
		return nil
	}

	addr := srv.APIAddr()
	env := client.Environment{Address: addr, Token: srv.OpsToken(), CACert: string(srv.CACert())}
	if err := client.SaveEnvironment(g.ConfigFile, o.envName, &env, false); err != nil {
		return fmt.Errorf("writing CLI config: %w", err)
	}
	c, err := client.New(env, false)
	if err != nil {
		return err
	}
	if err := c.WaitReady(ctx); err != nil {
		return stopped(err)
	}

	acfg := o.agent
	acfg.StateDir = agentDir
	acfg.Coordinators = []string{addr}
	acfg.APIAddr = o.agentAddr
	if host, port, err := net.SplitHostPort(o.agentAddr); err == nil {
		if port != "0" {
			port = "7404"
		}
		acfg.GossipAddr = net.JoinHostPort(host, port) // dynamic with a dynamic agent port
	}
	acfg.Name = o.name
	acfg.Logger = logger
	acfg.Heart = agentHeart
	acfg.Metrics = reg
	enrolled, err := isEnrolled(acfg.StateDir)
	if err != nil {
		return err
	}
	if !enrolled {
		res, err := c.Nodes.CreateJoinToken(ctx, connect.NewRequest(&corpusv1.CreateJoinTokenRequest{TtlSeconds: 600}))
		if err != nil {
			return stopped(fmt.Errorf("creating a join token for this host: %w", err))
		}
		acfg.JoinToken = res.Msg.Token
	}
	parts, err := agentParts(ctx, acfg)
	var ag *agent.Agent
	if err == nil {
		ag, err = agent.New(acfg, parts)
	}
	if err != nil {
		return stopped(explainIngress(err))
	}
	actx, stopAgent := context.WithCancel(context.Background())
	defer stopAgent()
	aerr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		aerr <- ag.Run(actx)
	}()

	devBanner{
		StateDir: o.stateDir, API: addr, Raft: o.raftAddr, AgentAPI: ag.APIAddr(), Node: o.name,
		Proxy: cmp.Or(ag.ProxyAddr(), "-"), DNS: cmp.Or(srv.DNSAddr(), "-"), Zone: ccfg.DNSZone, Metrics: cmp.Or(metricsURL, "-"),
		OpsTokenFile: filepath.Join(ccfg.DataDir, coordinator.OpsTokenFile), CA: filepath.Join(ccfg.DataDir, coordinator.TLSDir, coordinator.CACertFile),
		Env: o.envName, ConfigPath: g.ConfigFile,
	}.write(g.Stderr())

	select {
	case <-ctx.Done():
	case err := <-cerr:
		stopAgent()
		return fmt.Errorf("coordinator stopped: %w", err)
	case err := <-aerr:
		stopCoordinator()
		if err == nil {
			err = errors.New("agent stopped")
		}
		return fmt.Errorf("agent: %w", err)
	}
	logger.Info("stopping")
	// In order: guests and volumes through the agent (it stops them,
	// unmounts, detaches, removes their routes), then the agent, then the
	// node's bridge and NAT chains, which stay while any guest is left.
	var cleanupErr error
	if o.cleanup {
		if err := deleteNodeGuests(c, o.name, g); err != nil {
			cleanupErr = fmt.Errorf("cleanup incomplete, the node's network is kept for what is left: %w", err)
		}
	}
	stopAgent()
	<-aerr
	if o.cleanup && cleanupErr == nil {
		if err := ag.RemoveNetwork(context.Background()); err != nil {
			cleanupErr = fmt.Errorf("cleanup incomplete: removing the node's network: %w", err)
		}
	}
	stopCoordinator()
	return cleanupErr
}

func isEnrolled(stateDir string) (bool, error) {
	path := filepath.Join(stateDir, "agent.db")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	c, err := cache.Open(path)
	if err != nil {
		return false, err
	}
	defer c.Close()
	_, err = c.Identity()
	if errors.Is(err, cache.ErrNoIdentity) {
		return false, nil
	}
	return err == nil, err
}

// deleteNodeGuests deletes every guest on the node, with its volume, and
// every other volume of the node, and waits until the agent has removed
// them.
func deleteNodeGuests(c *client.Clients, node string, g *cli.Globals) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Projects and services first: their guests are deleted through
	// them (a project deleted drops its links, so services go after).
	errs := deleteProjectsAndServices(ctx, c, g)
	res, err := c.Guests.ListGuests(ctx, connect.NewRequest(&corpusv1.ListGuestsRequest{Node: node}))
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, v := range res.Msg.Guests {
		name := v.Guest.Name
		fmt.Fprintf(g.Stderr(), "deleting guest %s\n", name)
		_, err := c.Guests.DeleteGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: name, PurgeVolume: true}))
		if err != nil && connect.CodeOf(err) != connect.CodeNotFound { // gone meanwhile: fine
			errs = append(errs, err)
			continue
		}
		if err := g.WaitGuest(ctx, c, name, "", 1, 2*time.Minute); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, deleteNodeVolumes(ctx, c, node, g))...)
}

// deleteProjectsAndServices deletes every project (its environments'
// guests and volumes with it) and then every service, purging its data:
// the cluster of `corpus dev --cleanup` is this node's alone.
func deleteProjectsAndServices(ctx context.Context, c *client.Clients, g *cli.Globals) []error {
	var errs []error
	projects, err := c.Projects.ListProjects(ctx, connect.NewRequest(&corpusv1.ListProjectsRequest{}))
	if err != nil {
		return []error{err}
	}
	for _, p := range projects.Msg.Projects {
		fmt.Fprintf(g.Stderr(), "deleting project %s\n", p.Project.Name)
		if _, err := c.Projects.DeleteProject(ctx, connect.NewRequest(&corpusv1.DeleteProjectRequest{Name: p.Project.Name})); err != nil {
			errs = append(errs, err)
		}
	}
	services, err := c.Services.ListServices(ctx, connect.NewRequest(&corpusv1.ListServicesRequest{}))
	if err != nil {
		return append(errs, err)
	}
	for _, v := range services.Msg.Services {
		fmt.Fprintf(g.Stderr(), "deleting service %s\n", v.Service.Name)
		if _, err := c.Services.DeleteService(ctx, connect.NewRequest(&corpusv1.DeleteServiceRequest{Name: v.Service.Name, Purge: true})); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// deleteNodeVolumes deletes the volumes left on the node and waits until
// its agent has removed them.
func deleteNodeVolumes(ctx context.Context, c *client.Clients, node string, g *cli.Globals) error {
	for {
		res, err := c.Volumes.ListVolumes(ctx, connect.NewRequest(&corpusv1.ListVolumesRequest{}))
		if err != nil {
			return err
		}
		left := 0
		for _, v := range res.Msg.Volumes {
			if v.NodeName != node && v.Volume.NodeId != "" {
				continue
			}
			left++
			if v.Volume.DesiredState != corpusv1.VolumeDeleted && v.Volume.GuestId == "" {
				fmt.Fprintf(g.Stderr(), "deleting volume %s\n", v.Volume.Name)
				if _, err := c.Volumes.DeleteVolume(ctx, connect.NewRequest(&corpusv1.DeleteVolumeRequest{Name: v.Volume.Name})); err != nil {
					return err
				}
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("volumes still on node %s: %w", node, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// devBanner is what `corpus dev` prints once its cluster runs. It names
// the file the operator token is in, never the token: what corpus dev
// prints often goes to a log.
type devBanner struct {
	StateDir, API, Raft, AgentAPI, Node, Proxy, DNS, Zone string
	Metrics                                               string
	OpsTokenFile, CA, Env, ConfigPath                     string
}

func (b devBanner) write(w io.Writer) {
	fmt.Fprintf(w, `
corpus dev is running (state in %s)
  coordinator API   https://%s   (raft %s, mutual TLS)
  dashboard         https://%s/ui/   (log in with the operator token)
  agent API         https://%s   node %q
  proxy (ingress)   %s
  dns               %s   (zone %s; dig @HOST -p PORT web.guest.%s)
  metrics           %s   (Prometheus, coordinator and agent)
  operator token    in %s (its owner's alone; the CLI environment has it)
  cluster CA        %s
  CLI environment   %q in %s

Try:
  corpus node list
  corpus guest create web --image busybox --memory 256M --cpus 1
  corpus guest exec web -- uname -a
  corpus guest list

Ctrl-C stops the cluster; guests keep running unless --cleanup is given.
`, b.StateDir, b.API, b.Raft, b.API, b.AgentAPI, b.Node, b.Proxy, b.DNS, b.Zone, b.Zone, b.Metrics, b.OpsTokenFile, b.CA, b.Env, b.ConfigPath)
}
