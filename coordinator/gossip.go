package coordinator

import (
	"context"
	"time"

	"corpus/internal/gossip"
)

// gossipLoop runs this replica's gossip member until ctx ends. The
// member needs the cluster's secret, so it starts once the cluster is
// bootstrapped; a start that fails (the port is taken) is retried, and
// liveness rests on heartbeats meanwhile.
func (s *Server) gossipLoop(ctx context.Context) {
	logger := s.cfg.Logger.With("component", "gossip")
	backoff := time.Second
	for ctx.Err() == nil {
		view := s.store.Read()
		cfg := view.Config()
		if cfg == nil {
			if view.Wait(ctx) != nil {
				return
			}
			continue
		}
		m, err := gossip.Start(gossip.Config{
			Name: gossip.CoordinatorMember(s.cfg.ReplicaID), BindAddr: s.cfg.GossipAddr,
			ClusterID: cfg.ClusterId, Secret: cfg.AgentKey, OnChange: s.liveness.gossip, Logger: logger,
		})
		if err != nil {
			logger.Warn("gossip is off until it starts; liveness rests on heartbeats", "error", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Minute)
			continue
		}
		logger.Info("gossip member running", "addr", m.Addr())
		s.gossip.Store(m)
		s.joinReplicas(ctx, m)
		s.gossip.Store(nil)
		m.Close()
		return
	}
}

// GossipAddr is where this replica's gossip member is reached ("" while
// it has none).
func (s *Server) GossipAddr() string {
	if m := s.gossip.Load(); m != nil {
		return m.Addr()
	}
	return ""
}

// joinReplicas keeps this replica's gossip member joined to the other
// replicas' (from the state), until ctx ends: one pool, so the leader
// hears of every node whichever replica it joined through.
func (s *Server) joinReplicas(ctx context.Context, m *gossip.Member) {
	logger := s.cfg.Logger.With("component", "gossip")
	for ctx.Err() == nil {
		v := s.store.Read()
		alive := map[string]bool{}
		for _, name := range m.Alive() {
			alive[name] = true
		}
		var addrs []string
		for _, c := range v.Coordinators() {
			if c.Id != s.cfg.ReplicaID && c.GossipAddress != "" && !alive[gossip.CoordinatorMember(c.Id)] {
				addrs = append(addrs, c.GossipAddress)
			}
		}
		if len(addrs) > 0 {
			if err := m.Join(addrs...); err != nil {
				logger.Debug("joining the other replicas' gossip", "error", err)
			}
		}
		// Look again when the replicas change, and now and then.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v.Wait(wctx)
		cancel()
	}
}
