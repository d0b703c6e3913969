package daemon

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"corpus/agent"
	"corpus/agent/network"
	"corpus/agent/registryauth"
	"corpus/drivers"
	"corpus/drivers/catalog"
	"corpus/internal/metrics"
	"corpus/volume/loop"
)

// agentParts builds what an agent runs on from its configuration: the
// drivers cfg names (from the catalog), the loop volume backend when a
// driver keeps volumes on the host (or none runs), and the node's
// network. Host parts only serve drivers that use them: an agent whose
// guests run elsewhere (a cluster) keeps no bridge, NAT, proxy or loop
// files. A driver that cannot start is logged and left out (the agent
// reports it unhealthy), as is a volume backend that cannot.
func agentParts(ctx context.Context, cfg agent.Config) (agent.Parts, error) {
	if err := cfg.Validate(); err != nil {
		return agent.Parts{}, fmt.Errorf("agent config: %w", err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return agent.Parts{}, fmt.Errorf("creating state dir: %w", err)
	}
	logger := cmp.Or(cfg.Logger, slog.Default())
	log := logger.With("component", "agent")
	// One keychain for the drivers' pulls and the deploys': the agent
	// points it at its coordinators.
	p := agent.Parts{Drivers: map[string]drivers.Driver{}, Keychain: &registryauth.Keychain{Log: log}}
	// One OCI layer store for the node: the drivers' pulls and the
	// deploys' share layers and the image cache's cap.
	p.Images = catalog.ImageStore(cfg.StateDir, p.Keychain, logger.With("component", "images"))
	hostNet, hostVols := false, false
	for _, name := range cfg.Drivers {
		d, err := catalog.New(name, catalog.Config{StateDir: cfg.StateDir, Node: cfg.Name, Kubernetes: cfg.Kubernetes, Logger: logger,
			ImageCacheMax: cfg.ImageCacheMax, Keychain: p.Keychain, Images: p.Images})
		if err != nil {
			log.Warn("driver unavailable", "driver", name, "error", err)
			continue
		}
		p.Drivers[name] = d
		caps := d.Capabilities()
		hostNet = hostNet || caps.HostNetwork
		hostVols = hostVols || caps.Volumes.AgentKept()
	}
	proxyOnly, withNet := false, cfg.Network
	if len(p.Drivers) > 0 && !hostNet && cfg.Network {
		withNet = false
		for _, d := range p.Drivers {
			if _, ok := d.(drivers.RouteTargeter); ok {
				proxyOnly = true
			}
		}
		if proxyOnly {
			// Guests are reached at addresses their driver gives (a
			// cluster's Services): the proxy serves routes to them.
			log.Info("no driver uses the host network; bridge and NAT are off, the proxy serves routes to driver targets")
		} else {
			log.Info("no driver uses the host network; bridge, NAT and proxy are off")
		}
	}
	if hostVols || len(p.Drivers) == 0 {
		if b, err := loop.New(loop.Config{Root: filepath.Join(cfg.StateDir, "volumes", "images"), Logger: logger}); err != nil {
			log.Warn("volumes unavailable", "error", err)
		} else {
			p.Volumes = b
		}
	}
	if withNet || proxyOnly {
		nc := network.Config{StateDir: cfg.StateDir, Bridge: cfg.Bridge, ProxyOnly: proxyOnly,
			ProxyHTTPAddr: cfg.ProxyHTTPAddr, ProxyHTTPSAddr: cfg.ProxyHTTPSAddr, ProxyCerts: cfg.ProxyCerts,
			ProxyProcess: cfg.ProxyProcess, ProxyBinary: cfg.ProxyBinary, ProxyMetrics: cfg.ProxyMetrics,
			Metrics: metrics.Registerer(cfg.Metrics), Logger: logger}
		var err error
		if p.Network, err = network.New(ctx, nc); err != nil {
			return agent.Parts{}, err
		}
	}
	return p, nil
}
