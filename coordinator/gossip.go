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
		<-ctx.Done()
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
