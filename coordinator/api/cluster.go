package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/compat"
	"corpus/coordinator/state"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// Group is what the cluster services need from the replica's Raft group.
type Group interface {
	// Self describes this replica.
	Self() *corpusv1.PeerResponse
	// Leader is the leader's id and whether this replica is it.
	Leader() (id string, self bool)
	// Peers is the Raft configuration.
	Peers() ([]*corpusv1.RaftPeer, error)
	// AddPeer and RemovePeer change the group; on a follower they are
	// passed to the leader.
	AddPeer(ctx context.Context, id, raftAddr, apiAddr string) error
	RemovePeer(ctx context.Context, id string) error
	// Seen records heartbeats a follower passed on.
	Seen(nodeIDs []string)
	// ReadIndex makes this replica's state at least as new as every
	// write acknowledged before the call, for a linearizable read, and
	// returns the index it waited for.
	ReadIndex(ctx context.Context) (uint64, error)
}

// Business errors travel between replicas by name.
var errorKinds = map[string]error{
	"not_found":      state.ErrNotFound,
	"exists":         state.ErrExists,
	"invalid_token":  state.ErrInvalidToken,
	"stale":          state.ErrStale,
	"invalid":        state.ErrInvalid,
	"bad_transition": state.ErrBadTransition,
	"port_taken":     state.ErrPortTaken,
	"exhausted":      state.ErrExhausted,
	"needs_upgrade":  compat.ErrNeedsUpgrade,
}

// ErrorKind names a business error for ApplyResponse ("" when it has no
// name: it then travels as a message only).
func ErrorKind(err error) string {
	for k, e := range errorKinds {
		if errors.Is(err, e) {
			return k
		}
	}
	return ""
}

// ErrorFromKind turns an ApplyResponse's error back into an error that
// matches the state's sentinel, so handlers on followers decide as the
// leader's would.
func ErrorFromKind(kind, msg string) error {
	if e, ok := errorKinds[kind]; ok {
		return &remoteError{msg: msg, kind: e}
	}
	return errors.New(msg)
}

type remoteError struct {
	msg  string
	kind error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

func (s *clusterService) Peer(ctx context.Context, _ *connect.Request[corpusv1.PeerRequest]) (*connect.Response[corpusv1.PeerResponse], error) {
	return connect.NewResponse(s.b.Group.Self()), nil
}

// Apply commits a command a follower passed on; only the leader takes it.
func (s *clusterService) Apply(ctx context.Context, req *connect.Request[corpusv1.ApplyRequest]) (*connect.Response[corpusv1.ApplyResponse], error) {
	if _, self := s.b.Group.Leader(); !self {
		return nil, ToConnect(ErrNotLeader)
	}
	var cmd corpusv1.Command
	if err := proto.Unmarshal(req.Msg.Command, &cmd); err != nil || cmd.Cmd == nil {
		return nil, ToConnect(Invalidf("forwarded command does not decode"))
	}
	idx, err := s.b.ProposeLocal(ctx, &cmd)
	res := &corpusv1.ApplyResponse{Index: idx}
	if err != nil {
		if errors.Is(err, ErrNotLeader) {
			return nil, ToConnect(err)
		}
		kind := ErrorKind(err)
		if kind == "" && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			return nil, ToConnect(err)
		}
		res.Error, res.ErrorKind = err.Error(), kind
	}
	return connect.NewResponse(res), nil
}

// ReadIndex answers a follower's question before a linearizable read;
// only the leader takes it.
func (s *clusterService) ReadIndex(ctx context.Context, _ *connect.Request[corpusv1.ReadIndexRequest]) (*connect.Response[corpusv1.ReadIndexResponse], error) {
	if _, self := s.b.Group.Leader(); !self {
		return nil, ToConnect(ErrNotLeader)
	}
	idx, err := s.b.Group.ReadIndex(ctx)
	if err != nil {
		return nil, ToConnect(err)
	}
	return connect.NewResponse(&corpusv1.ReadIndexResponse{Index: idx}), nil
}

func (s *clusterService) Seen(ctx context.Context, req *connect.Request[corpusv1.SeenRequest]) (*connect.Response[corpusv1.SeenResponse], error) {
	if len(req.Msg.NodeIds) > 100000 {
		return nil, ToConnect(Invalidf("too many node ids"))
	}
	s.b.Group.Seen(req.Msg.NodeIds)
	return connect.NewResponse(&corpusv1.SeenResponse{}), nil
}

func (s *clusterService) RaftPeers(ctx context.Context, _ *connect.Request[corpusv1.RaftPeersRequest]) (*connect.Response[corpusv1.RaftPeersResponse], error) {
	peers, err := s.b.Group.Peers()
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&corpusv1.RaftPeersResponse{Peers: peers, Index: s.b.Store.Read().Index()}), nil
}

func (s *clusterService) AddRaftPeer(ctx context.Context, req *connect.Request[corpusv1.AddRaftPeerRequest]) (*connect.Response[corpusv1.AddRaftPeerResponse], error) {
	m := req.Msg
	if err := names.Validate("replica", m.Id); err != nil {
		return nil, ToConnect(err)
	}
	for what, a := range map[string]string{"raft address": m.RaftAddress, "api address": m.ApiAddress} {
		if err := validHostPort(a); err != nil {
			return nil, ToConnect(Invalidf("%s %q: %v", what, a, err))
		}
	}
	if err := s.b.Group.AddPeer(ctx, m.Id, m.RaftAddress, m.ApiAddress); err != nil {
		return nil, ToConnect(err)
	}
	return connect.NewResponse(&corpusv1.AddRaftPeerResponse{}), nil
}

func (s *clusterService) RemoveRaftPeer(ctx context.Context, req *connect.Request[corpusv1.RemoveRaftPeerRequest]) (*connect.Response[corpusv1.RemoveRaftPeerResponse], error) {
	if err := names.Validate("replica", req.Msg.Id); err != nil {
		return nil, ToConnect(err)
	}
	if err := s.b.Group.RemovePeer(ctx, req.Msg.Id); err != nil {
		return nil, ToConnect(err)
	}
	return connect.NewResponse(&corpusv1.RemoveRaftPeerResponse{}), nil
}

// validHostPort checks an address is host:port with a usable port.
func (s *clusterService) RotateKeyring(ctx context.Context, _ *connect.Request[corpusv1.RotateKeyringRequest]) (*connect.Response[corpusv1.RotateKeyringResponse], error) {
	res, err := s.b.keyrings.Rotate(ctx)
	if err != nil {
		return nil, ToConnect(err)
	}
	return connect.NewResponse(res), nil
}
