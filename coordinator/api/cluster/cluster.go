package cluster

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/api"
	"corpus/coordinator/auth"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

func (s *clusterService) Peer(ctx context.Context, _ *connect.Request[corpusv1.PeerRequest]) (*connect.Response[corpusv1.PeerResponse], error) {
	return connect.NewResponse(s.b.Group.Self()), nil
}

// Apply commits a command a follower passed on; only the leader takes it.
func (s *clusterService) Apply(ctx context.Context, req *connect.Request[corpusv1.ApplyRequest]) (*connect.Response[corpusv1.ApplyResponse], error) {
	if _, self := s.b.Group.Leader(); !self {
		return nil, api.ToConnect(api.ErrNotLeader)
	}
	var cmd corpusv1.Command
	if err := proto.Unmarshal(req.Msg.Command, &cmd); err != nil || cmd.Cmd == nil {
		return nil, api.ToConnect(api.Invalidf("forwarded command does not decode"))
	}
	idx, err := s.b.ProposeLocal(ctx, &cmd)
	res := &corpusv1.ApplyResponse{Index: idx}
	if err != nil {
		if errors.Is(err, api.ErrNotLeader) {
			return nil, api.ToConnect(err)
		}
		kind := api.ErrorKind(err)
		if kind == "" && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			return nil, api.ToConnect(err)
		}
		res.Error, res.ErrorKind = err.Error(), kind
	}
	return connect.NewResponse(res), nil
}

// ReadIndex answers a follower's question before a linearizable read;
// only the leader takes it.
func (s *clusterService) ReadIndex(ctx context.Context, _ *connect.Request[corpusv1.ReadIndexRequest]) (*connect.Response[corpusv1.ReadIndexResponse], error) {
	if _, self := s.b.Group.Leader(); !self {
		return nil, api.ToConnect(api.ErrNotLeader)
	}
	idx, err := s.b.Group.ReadIndex(ctx)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return connect.NewResponse(&corpusv1.ReadIndexResponse{Index: idx}), nil
}

func (s *clusterService) Seen(ctx context.Context, req *connect.Request[corpusv1.SeenRequest]) (*connect.Response[corpusv1.SeenResponse], error) {
	if len(req.Msg.NodeIds) > 100000 {
		return nil, api.ToConnect(api.Invalidf("too many node ids"))
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
		return nil, api.ToConnect(err)
	}
	for what, a := range map[string]string{"raft address": m.RaftAddress, "api address": m.ApiAddress} {
		if err := api.ValidHostPort(a); err != nil {
			return nil, api.ToConnect(api.Invalidf("%s %q: %v", what, a, err))
		}
	}
	if err := s.b.Group.AddPeer(ctx, m.Id, m.RaftAddress, m.ApiAddress); err != nil {
		return nil, api.ToConnect(err)
	}
	return connect.NewResponse(&corpusv1.AddRaftPeerResponse{}), nil
}

func (s *clusterService) RemoveRaftPeer(ctx context.Context, req *connect.Request[corpusv1.RemoveRaftPeerRequest]) (*connect.Response[corpusv1.RemoveRaftPeerResponse], error) {
	if err := names.Validate("replica", req.Msg.Id); err != nil {
		return nil, api.ToConnect(err)
	}
	if err := s.b.Group.RemovePeer(ctx, req.Msg.Id); err != nil {
		return nil, api.ToConnect(err)
	}
	return connect.NewResponse(&corpusv1.RemoveRaftPeerResponse{}), nil
}

// RotateKeyring makes a new key the keyring's only one and reseals every
// value (keyring.Ring.Rotate).
func (s *clusterService) RotateKeyring(ctx context.Context, _ *connect.Request[corpusv1.RotateKeyringRequest]) (*connect.Response[corpusv1.RotateKeyringResponse], error) {
	res, err := s.b.Keyring().Rotate(ctx)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return connect.NewResponse(res), nil
}

// RotateCa starts, forces or aborts a rotation of the cluster CA
// (carotation.Rotator); the leader's loop moves it on. It answers once
// this replica has taken the change: the CLI trusts the CAs answered at
// once (a forced end, alone the new one) and calls this replica again.
func (s *clusterService) RotateCa(ctx context.Context, req *connect.Request[corpusv1.RotateCaRequest]) (*connect.Response[corpusv1.RotateCaResponse], error) {
	r := s.b.CARotations
	var err error
	switch m := req.Msg; {
	case m.Finish && m.Abort:
		return nil, api.ToConnect(api.Invalidf("give finish or abort, not both"))
	case m.Finish:
		err = r.Force(ctx)
	case m.Abort:
		err = r.Abort(ctx)
	default:
		err = r.Start(ctx, auth.FromContext(ctx).String())
	}
	if err != nil {
		return nil, api.ToConnect(err)
	}
	if err := s.b.WaitCA(ctx); err != nil {
		return nil, api.ToConnect(err)
	}
	st, err := r.Status()
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return connect.NewResponse(&corpusv1.RotateCaResponse{Status: st}), nil
}

// CaStatus describes the cluster CA and a rotation in progress.
func (s *clusterService) CaStatus(ctx context.Context, _ *connect.Request[corpusv1.CaStatusRequest]) (*connect.Response[corpusv1.CaStatusResponse], error) {
	st, err := s.b.CARotations.Status()
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return connect.NewResponse(&corpusv1.CaStatusResponse{Status: st}), nil
}
