package agent

import (
	"context"
	"slices"
	"time"

	"corpus/internal/gossip"
	"corpus/internal/rpc"
)

// startGossip starts the node's gossip member, through which coordinators
// find out within seconds when this node stops answering. Without it
// (off, or its port taken) the heartbeats of reportLoop still keep the
// node alive in the coordinators' eyes, only slower to declare it down.
func (a *Agent) startGossip() {
	if a.cfg.GossipAddr == "" {
		return
	}
	m, err := gossip.Start(gossip.Config{
		Name: gossip.NodeMember(a.id.NodeID, gossip.NewRun()), BindAddr: a.cfg.GossipAddr, AdvertiseHost: a.gossipHost(),
		ClusterID: a.id.ClusterID, Secret: a.id.AgentKey, Logger: a.cfg.Logger.With("component", "gossip"),
	})
	if err != nil {
		a.logger.Error("gossip is off; coordinators see this node only through its reports", "error", err)
		return
	}
	a.gossip = m
	a.logger.Info("gossip member running", "addr", m.Addr())
}

// gossipHost is the address peers reach the member at: the host
// coordinators reach the agent's API at, when that is a specific
// address (else memberlist picks one of the host's).
func (a *Agent) gossipHost() string {
	host, _ := rpc.SpecificHost(a.advertise())
	return host
}

// gossipLoop keeps the member in the pool: it joins the coordinator
// member the watch named whenever it knows no live coordinator member
// (at start, after a partition healed) and whenever a new watch stream
// starts (the coordinator may have restarted, its member not knowing
// this node yet).
func (a *Agent) gossipLoop(ctx context.Context) {
	if a.gossip == nil {
		return
	}
	defer a.gossip.Close()
	tick := time.NewTicker(a.cfg.ReportInterval)
	defer tick.Stop()
	var (
		lastErr        string
		kicked, joined bool
	)
	for {
		a.mu.Lock()
		peer := a.gossipPeer
		a.mu.Unlock()
		if peer != "" && (kicked || !slices.ContainsFunc(a.gossip.Alive(), gossip.IsCoordinator)) {
			err := a.gossip.Join(peer)
			switch {
			case err != nil && err.Error() != lastErr:
				a.logger.Warn("joining the coordinators' gossip; will retry", "coordinator", peer, "error", err)
				lastErr = err.Error()
			case err == nil:
				if !joined || lastErr != "" {
					a.logger.Info("joined the coordinators' gossip", "coordinator", peer)
				}
				joined, lastErr = true, ""
			}
		}
		kicked = false
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-a.gossipKick:
			kicked = true
		}
	}
}
