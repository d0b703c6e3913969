package coordinator

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/api"
	"corpus/coordinator/compat"
	"corpus/coordinator/state"
	"corpus/internal/rpc"
	"corpus/internal/version"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// The replica in its group: forming the group (--bootstrap-expect),
// passing writes and heartbeats from followers to the leader, telling the
// group where each replica answers, and changing membership.

var _ api.Group = (*Server)(nil)

// Self describes this replica to its peers.
func (s *Server) Self() *corpusv1.PeerResponse {
	id, _ := s.Leader()
	return &corpusv1.PeerResponse{
		Id:              s.cfg.ReplicaID,
		RaftAddress:     string(s.replica.transport.LocalAddr()),
		ApiAddress:      s.advertiseAPI(),
		BootstrapExpect: int32(s.cfg.BootstrapExpect),
		InGroup:         s.inGroup(),
		Leader:          id,
	}
}

// advertiseAPI is the API address peers and clients use.
func (s *Server) advertiseAPI() string {
	if s.cfg.AdvertiseAPI != "" {
		return s.cfg.AdvertiseAPI
	}
	return s.APIAddr()
}

// Leader is the leader's id and whether this replica is it.
func (s *Server) Leader() (string, bool) {
	_, id := s.replica.raft.LeaderWithID()
	return string(id), s.replica.isLeader()
}

func (s *Server) inGroup() bool {
	f := s.replica.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

// inGroupOfMany reports whether the group has other voters.
func (s *Server) inGroupOfMany() bool {
	f := s.replica.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 1
}

// Peers is the Raft configuration, with API addresses from the state.
func (s *Server) Peers() ([]*corpusv1.RaftPeer, error) {
	f := s.replica.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	leader, _ := s.Leader()
	view := s.store.Read()
	var out []*corpusv1.RaftPeer
	for _, srv := range f.Configuration().Servers {
		co := view.Coordinator(string(srv.ID))
		out = append(out, &corpusv1.RaftPeer{
			Id: string(srv.ID), RaftAddress: string(srv.Address), ApiAddress: co.GetApiAddress(),
			Voter: srv.Suffrage == raft.Voter, Leader: string(srv.ID) == leader, Version: co.GetVersion(),
			ServerVersion: co.GetServerVersion(),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out, nil
}

// voters lists the ids of the group's voters.
func (s *Server) voters() ([]string, error) {
	f := s.replica.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var ids []string
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			ids = append(ids, string(srv.ID))
		}
	}
	return ids, nil
}

// AddPeer adds a voter (on the leader; a follower passes it on).
func (s *Server) AddPeer(ctx context.Context, id, raftAddr, apiAddr string) error {
	if !s.replica.isLeader() {
		return s.onLeader(ctx, func(c corpusv1connect.ClusterServiceClient) error {
			_, err := c.AddRaftPeer(ctx, connect.NewRequest(&corpusv1.AddRaftPeerRequest{Id: id, RaftAddress: raftAddr, ApiAddress: apiAddr}))
			return err
		})
	}
	s.replica.members.Lock()
	err := s.replica.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, 30*time.Second).Error()
	s.replica.members.Unlock()
	if err != nil {
		if aerr := s.replica.refused(err); aerr != nil {
			err = aerr
		}
		return fmt.Errorf("adding %s at %s: %w", id, raftAddr, err)
	}
	s.logger.Info("raft peer added", "id", id, "raft", raftAddr, "api", apiAddr)
	_, err = s.replica.propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_UpsertCoordinator{UpsertCoordinator: &corpusv1.UpsertCoordinator{
		Coordinator: &corpusv1.Coordinator{Id: id, RaftAddress: raftAddr, ApiAddress: apiAddr},
	}}})
	return err
}

// RemovePeer removes a replica from the group (on the leader).
func (s *Server) RemovePeer(ctx context.Context, id string) error {
	if !s.replica.isLeader() {
		return s.onLeader(ctx, func(c corpusv1connect.ClusterServiceClient) error {
			_, err := c.RemoveRaftPeer(ctx, connect.NewRequest(&corpusv1.RemoveRaftPeerRequest{Id: id}))
			return err
		})
	}
	peers, err := s.Peers()
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(peers, func(p *corpusv1.RaftPeer) bool { return p.Id == id }) {
		return fmt.Errorf("replica %s is not in the group: %w", id, state.ErrNotFound)
	}
	// Forget its address first: once removed, this replica may no longer
	// lead (it may be the one removed).
	if _, err := s.replica.propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_RemoveCoordinator{RemoveCoordinator: &corpusv1.RemoveCoordinator{Id: id}}}); err != nil {
		return err
	}
	s.replica.members.Lock()
	err = s.replica.raft.RemoveServer(raft.ServerID(id), 0, 30*time.Second).Error()
	s.replica.members.Unlock()
	if err != nil {
		if aerr := s.replica.refused(err); aerr != nil {
			err = aerr
		}
		return fmt.Errorf("removing %s: %w", id, err)
	}
	s.logger.Info("raft peer removed", "id", id)
	return nil
}

// Seen records heartbeats a follower passed on.
func (s *Server) Seen(nodeIDs []string) {
	for _, id := range nodeIDs {
		s.liveness.seen(id)
	}
}

// errLeadsNow is leaderClient's answer when this replica became the
// leader after its caller saw it follow: the caller does the work itself,
// or its client retries (it wraps api.ErrNotLeader).
var errLeadsNow = fmt.Errorf("%w (this replica was elected leader meanwhile; retry)", api.ErrNotLeader)

// leaderClient is a client of the leader's API, presenting the cluster's
// coordinator key.
func (s *Server) leaderClient() (corpusv1connect.ClusterServiceClient, string, error) {
	id, self := s.Leader()
	if self {
		return nil, "", errLeadsNow
	}
	if id == "" {
		return nil, "", fmt.Errorf("%w (no leader is elected yet; retry shortly)", api.ErrNotLeader)
	}
	view := s.store.Read()
	addr := view.Coordinator(id).GetApiAddress()
	key := view.Config().GetCoordinatorKey()
	if addr == "" || key == "" {
		return nil, "", fmt.Errorf("%w (the leader %s has not said where it answers yet; retry shortly)", api.ErrNotLeader, id)
	}
	c := corpusv1connect.NewClusterServiceClient(s.peerHTTP, rpc.BaseURL(addr),
		connect.WithInterceptors(rpc.Bearer(rpc.CoordinatorCredentialPrefix+key)))
	return c, addr, nil
}

// onLeader runs f against the leader's API.
func (s *Server) onLeader(ctx context.Context, f func(corpusv1connect.ClusterServiceClient) error) error {
	c, addr, err := s.leaderClient()
	if err != nil {
		return err
	}
	if err := f(c); err != nil {
		if connect.CodeOf(err) == connect.CodeUnavailable {
			return fmt.Errorf("%w (the leader at %s did not answer: %v; %w)", api.ErrNotLeader, addr, err, rpc.ErrMaybeDone)
		}
		return err
	}
	return nil
}

// propose commits a command: on the leader through Raft, on a follower by
// passing it to the leader. Either way, when it returns the command is
// applied to this replica's state too, so a handler reads its own write.
func (s *Server) propose(ctx context.Context, cmd *corpusv1.Command) (uint64, error) {
	if s.replica.isLeader() {
		return s.replica.propose(ctx, cmd)
	}
	return s.passOn(ctx, cmd)
}

// passOn is propose on a follower: the command goes to the leader. When
// this replica was elected meanwhile, it proposes the command itself.
func (s *Server) passOn(ctx context.Context, cmd *corpusv1.Command) (uint64, error) {
	data, err := proto.Marshal(cmd)
	if err != nil {
		return 0, err
	}
	var res *corpusv1.ApplyResponse
	err = s.onLeader(ctx, func(c corpusv1connect.ClusterServiceClient) error {
		r, err := c.Apply(ctx, connect.NewRequest(&corpusv1.ApplyRequest{Command: data}))
		if err != nil {
			return err
		}
		res = r.Msg
		return nil
	})
	if errors.Is(err, errLeadsNow) {
		return s.replica.propose(ctx, cmd)
	}
	if err != nil {
		return 0, err
	}
	if !s.waitApplied(ctx, res.Index) {
		// Done, but not readable here yet: answering success would let
		// the caller read its write back as missing, and an idempotent
		// retry's comparison with what exists would see nothing.
		return res.Index, fmt.Errorf("%w: the write is done, at index %d, and this replica has applied only %d (%w; retry to read it back)", api.ErrBusy, res.Index, s.store.Applied(), rpc.ErrMaybeDone)
	}
	if res.Error != "" {
		return res.Index, api.ErrorFromKind(res.ErrorKind, res.Error)
	}
	return res.Index, nil
}

// ReadIndex makes this replica's state at least as new as every write
// acknowledged before the call. The leader commits a Raft barrier (which
// only a leader a majority still follows can), after which its state
// machine has applied every earlier entry; a follower asks the leader for
// that index and applies up to it.
func (s *Server) ReadIndex(ctx context.Context) (uint64, error) {
	if s.replica.isLeader() {
		timeout := 5 * time.Second
		if d, ok := ctx.Deadline(); ok {
			timeout = min(timeout, time.Until(d))
		}
		if err := s.replica.barrier(timeout); err != nil {
			return 0, fmt.Errorf("%w (confirming leadership for a linearizable read: %v)", api.ErrNotLeader, err)
		}
		return s.store.Applied(), nil
	}
	var idx uint64
	err := s.onLeader(ctx, func(c corpusv1connect.ClusterServiceClient) error {
		r, err := c.ReadIndex(ctx, connect.NewRequest(&corpusv1.ReadIndexRequest{}))
		if err != nil {
			return err
		}
		idx = r.Msg.Index
		return nil
	})
	if err != nil {
		return 0, err
	}
	if !s.waitApplied(ctx, idx) {
		return 0, fmt.Errorf("%w: this replica has not applied index %d, which a linearizable read needs, in time; it applied %d", api.ErrBusy, idx, s.store.Applied())
	}
	return idx, nil
}

// waitApplied waits until this replica's state machine applied idx, so
// a write forwarded to the leader reads back here: while ctx lasts, and
// 30 s at most. It asks the store for the last entry applied, whatever
// its outcome: a command that failed with a business error leaves the
// state's own index as it was; and Raft's applied index may run ahead
// of the state machine. It says whether the replica got there.
func (s *Server) waitApplied(ctx context.Context, idx uint64) bool {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return s.store.WaitApplied(ctx, idx)
}

// seenForwarder passes heartbeats received on a follower to the leader,
// in batches, so the leader's deadlines see every node whichever replica
// it reports to.
type seenForwarder struct {
	mu      sync.Mutex
	pending map[string]bool
}

func (s *Server) seen(nodeID string) {
	if s.replica.isLeader() {
		s.liveness.seen(nodeID)
		return
	}
	s.fwd.mu.Lock()
	s.fwd.pending[nodeID] = true
	s.fwd.mu.Unlock()
}

func (s *Server) forwardSeen(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.fwd.mu.Lock()
		ids := make([]string, 0, len(s.fwd.pending))
		for id := range s.fwd.pending {
			ids = append(ids, id)
		}
		clear(s.fwd.pending)
		s.fwd.mu.Unlock()
		if len(ids) == 0 || s.replica.isLeader() {
			s.Seen(ids)
			continue
		}
		err := s.onLeader(ctx, func(c corpusv1connect.ClusterServiceClient) error {
			_, err := c.Seen(ctx, connect.NewRequest(&corpusv1.SeenRequest{NodeIds: ids}))
			return err
		})
		if err != nil && ctx.Err() == nil {
			s.logger.Debug("passing heartbeats to the leader", "error", err)
		}
	}
}

// registerLoop keeps this replica's addresses in the state, so followers
// can reach the leader and clients can be pointed at it.
func (s *Server) registerLoop(ctx context.Context) {
	for ctx.Err() == nil {
		v := s.store.Read()
		v.WatchIndex()
		self := s.Self()
		want := &corpusv1.Coordinator{Id: self.Id, RaftAddress: self.RaftAddress, ApiAddress: self.ApiAddress, DnsAddress: s.DNSAddr(), GossipAddress: s.GossipAddr(), Version: version.Version, ServerVersion: compat.Current.String()}
		want.CaPin, want.TrustedCaPins = s.certs.pins()
		have := v.Coordinator(self.Id)
		if v.Config() != nil && s.inGroup() && (have == nil || have.RaftAddress != want.RaftAddress || have.ApiAddress != want.ApiAddress ||
			have.DnsAddress != want.DnsAddress || have.GossipAddress != want.GossipAddress || have.Version != want.Version || have.ServerVersion != want.ServerVersion ||
			have.CaPin != want.CaPin || !slices.Equal(have.TrustedCaPins, want.TrustedCaPins)) {
			if _, err := s.propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_UpsertCoordinator{UpsertCoordinator: &corpusv1.UpsertCoordinator{Coordinator: want}}}); err != nil {
				s.logger.Debug("registering this replica", "error", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			continue
		}
		// Wake on state changes, and now and then for leader changes.
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		v.Wait(wctx)
		cancel()
	}
}

// formGroup waits until BootstrapExpect replicas (this one included) know
// of each other through Join, none of them in a group yet, then
// bootstraps them all with the same configuration. The replica with the
// lowest id keeps the operator token. A replica that finds a group
// already formed waits to be added (corpus operator raft add-peer).
func (s *Server) formGroup(ctx context.Context) {
	warned := false
	started := time.Now()
	for ctx.Err() == nil {
		if s.inGroup() {
			// A peer may have bootstrapped the group with this replica
			// in it first; the token goes to the lowest id all the same.
			if err := s.takeToken(); err != nil {
				s.logger.Error("writing the bootstrap token", "error", err)
			}
			return
		}
		peers := map[string]*corpusv1.PeerResponse{s.cfg.ReplicaID: s.Self()}
		formed := ""
		for _, addr := range s.cfg.Join {
			c := corpusv1connect.NewClusterServiceClient(s.peerHTTP, rpc.BaseURL(addr))
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			res, err := c.Peer(pctx, connect.NewRequest(&corpusv1.PeerRequest{}))
			cancel()
			if err != nil {
				s.logger.Debug("asking a peer", "peer", addr, "error", err)
				continue
			}
			p := res.Msg
			if p.InGroup {
				formed = addr
			}
			if p.Id != "" && p.BootstrapExpect == int32(s.cfg.BootstrapExpect) {
				peers[p.Id] = p
			}
		}
		switch {
		case formed != "":
			if !warned && time.Since(started) > 10*time.Second {
				s.logger.Warn("a group already exists; waiting to be added to it", "peer", formed,
					"add_with", fmt.Sprintf("corpus operator raft add-peer --id %s --raft-address %s --api-address %s",
						s.cfg.ReplicaID, s.Self().RaftAddress, s.advertiseAPI()))
				warned = true
			}
		case len(peers) >= s.cfg.BootstrapExpect:
			// Formed or not (a replica that voted in a peer's election
			// can no longer bootstrap, yet has no configuration until
			// the leader sends it), the token is taken at the top once
			// the configuration is known.
			if err := s.bootstrapGroup(peers); err != nil {
				s.logger.Error("bootstrapping the group", "error", err)
			} else if s.inGroup() {
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (s *Server) bootstrapGroup(peers map[string]*corpusv1.PeerResponse) error {
	var cfg raft.Configuration
	ids := make([]string, 0, len(peers))
	for id := range peers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		cfg.Servers = append(cfg.Servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(peers[id].RaftAddress), Suffrage: raft.Voter})
	}
	s.logger.Info("forming the raft group", "members", ids)
	if err := s.replica.raft.BootstrapCluster(cfg).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return err
	}
	return nil
}

// takeToken creates the operator token when this replica is the group's
// bootstrapper and the cluster has no config yet.
func (s *Server) takeToken() error {
	id, _, ok := s.bootstrapper()
	if !ok || string(id) != s.cfg.ReplicaID || s.store.Read().Config() != nil {
		return nil
	}
	tok, err := loadOrCreateToken(filepath.Join(s.cfg.DataDir, OpsTokenFile))
	if err != nil {
		return err
	}
	s.tokenMu.Lock()
	s.opsToken = tok
	s.tokenMu.Unlock()
	return nil
}

// bootstrapper is the replica that holds the operator token of a group
// formed with --bootstrap-expect: the lowest id.
func (s *Server) bootstrapper() (raft.ServerID, raft.ServerAddress, bool) {
	f := s.replica.raft.GetConfiguration()
	if f.Error() != nil || len(f.Configuration().Servers) == 0 {
		return "", "", false
	}
	servers := append([]raft.Server(nil), f.Configuration().Servers...)
	sort.Slice(servers, func(i, j int) bool { return servers[i].ID < servers[j].ID })
	return servers[0].ID, servers[0].Address, true
}
