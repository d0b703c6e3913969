package coordinator

import (
	"context"

	"corpus/coordinator/api"
	"corpus/dns"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// The Server is what the API's handlers ask of this replica.
var (
	_ api.Proposer   = (*Server)(nil)
	_ api.Leadership = (*Server)(nil)
	_ api.Agents     = (*Server)(nil)
	_ api.Zones      = (*Server)(nil)
	_ api.Group      = (*Server)(nil)
)

// Propose commits a command (see propose).
func (s *Server) Propose(ctx context.Context, cmd *corpusv1.Command) (uint64, error) {
	return s.propose(ctx, cmd)
}

// ProposeLocal commits a command through this replica's Raft only: a
// command a follower passed on.
func (s *Server) ProposeLocal(ctx context.Context, cmd *corpusv1.Command) (uint64, error) {
	return s.replica.propose(ctx, cmd)
}

// LeaderAddr is the current leader's Raft address, "" if unknown.
func (s *Server) LeaderAddr() string { return s.replica.leaderAddr() }

// NodeSeen records that a node's agent reported now.
func (s *Server) NodeSeen(nodeID string) { s.seen(nodeID) }

// AgentClient is a client of a node's agent (see agentClient).
func (s *Server) AgentClient(n *corpusv1.Node) corpusv1connect.NodeAgentServiceClient {
	return s.agentClient(n)
}

// Zone is the zone this replica's DNS server answers from (nil: DNS is
// off).
func (s *Server) Zone() *dns.Zone { return s.servedZone() }

// ZoneNow is the zone as of this replica's state now (see currentZone).
func (s *Server) ZoneNow() *dns.Zone { return s.currentZone() }

// RecordFits says whether rec could join the zone as of this replica's
// state now (see recordFits).
func (s *Server) RecordFits(rec dns.Record) error { return s.recordFits(rec) }
