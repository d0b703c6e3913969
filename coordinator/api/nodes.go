package api

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/scheduler"
	"corpus/coordinator/state"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
)

const (
	defaultTokenTTL = time.Hour
	maxTokenTTL     = 7 * 24 * time.Hour
)

type nodeService struct{ b *Backend }

func (s *nodeService) CreateJoinToken(ctx context.Context, req *connect.Request[corpusv1.CreateJoinTokenRequest]) (*connect.Response[corpusv1.CreateJoinTokenResponse], error) {
	// Check the seconds before converting: a large count overflows
	// time.Duration and wraps around into range.
	secs := req.Msg.TtlSeconds
	if secs < 0 || secs > int64(maxTokenTTL/time.Second) {
		return nil, toConnect(invalidf("token ttl of %d seconds is out of range (0 to %s)", secs, maxTokenTTL))
	}
	ttl := time.Duration(secs) * time.Second
	if ttl == 0 {
		ttl = defaultTokenTTL
	}
	id, tokSecret := secret.Hex(6), secret.Hex(24)
	now := time.Now()
	tok := &corpusv1.JoinToken{
		Id:         id,
		SecretHash: secret.Hash(tokSecret),
		CreatedAt:  timestamppb.New(now),
		ExpiresAt:  timestamppb.New(now.Add(ttl)),
	}
	if _, err := s.b.write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_CreateJoinToken{
		CreateJoinToken: &corpusv1.CreateJoinToken{Token: tok},
	}}); err != nil {
		return nil, err
	}
	info := proto.Clone(tok).(*corpusv1.JoinToken)
	info.SecretHash = ""
	return connect.NewResponse(&corpusv1.CreateJoinTokenResponse{Token: id + "." + tokSecret, Info: info}), nil
}

func (s *nodeService) ListNodes(ctx context.Context, _ *connect.Request[corpusv1.ListNodesRequest]) (*connect.Response[corpusv1.ListNodesResponse], error) {
	view := s.b.Store.Read()
	res := &corpusv1.ListNodesResponse{Index: view.Index()}
	for _, n := range view.Nodes() {
		res.Nodes = append(res.Nodes, nodeView(view, n))
	}
	return connect.NewResponse(res), nil
}

func (s *nodeService) GetNode(ctx context.Context, req *connect.Request[corpusv1.GetNodeRequest]) (*connect.Response[corpusv1.GetNodeResponse], error) {
	view := s.b.Store.Read()
	n := findNode(view, req.Msg.Name)
	if n == nil {
		return nil, toConnect(notFound("node", req.Msg.Name, "corpus node list"))
	}
	return connect.NewResponse(&corpusv1.GetNodeResponse{Node: nodeView(view, n)}), nil
}

func findNode(view *state.Snap, name string) *corpusv1.Node {
	if n := view.NodeByName(name); n != nil {
		return n
	}
	return view.Node(name)
}

// nodeView is a node as the API shows it: secrets removed, allocation added.
func nodeView(view *state.Snap, n *corpusv1.Node) *corpusv1.NodeView {
	guests := view.GuestsOnNode(n.Id)
	n = proto.Clone(n).(*corpusv1.Node)
	n.SecretHash = ""
	return &corpusv1.NodeView{Node: n, Allocated: scheduler.Allocated(guests), Guests: int32(len(guests))}
}
