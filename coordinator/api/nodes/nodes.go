// Package nodes serves NodeService: join tokens, the enrolled nodes,
// their modes and drains.
package nodes

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/api"
	"corpus/coordinator/compat"
	"corpus/coordinator/scheduler"
	"corpus/coordinator/state"
	"corpus/internal/names"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

const (
	defaultTokenTTL = time.Hour
	maxTokenTTL     = 7 * 24 * time.Hour
)

// New returns the handler of NodeService.
func New(b *api.Backend) corpusv1connect.NodeServiceHandler { return &nodeService{b} }

type nodeService struct{ b *api.Backend }

func (s *nodeService) CreateJoinToken(ctx context.Context, req *connect.Request[corpusv1.CreateJoinTokenRequest]) (*connect.Response[corpusv1.CreateJoinTokenResponse], error) {
	// Check the seconds before converting: a large count overflows
	// time.Duration and wraps around into range.
	secs := req.Msg.TtlSeconds
	if secs < 0 || secs > int64(maxTokenTTL/time.Second) {
		return nil, api.ToConnect(api.Invalidf("token ttl of %d seconds is out of range (0 to %s)", secs, maxTokenTTL))
	}
	ttl := time.Duration(secs) * time.Second
	if ttl == 0 {
		ttl = defaultTokenTTL
	}
	// The token pins the CA that signs: on a replica that has not yet
	// taken a rotation's step, that would be the previous one, and a
	// node joining with it would refuse every coordinator.
	if err := s.b.WaitCA(ctx); err != nil {
		return nil, api.ToConnect(err)
	}
	id, tokSecret := secret.Hex(6), secret.Hex(24)
	now := s.b.Now()
	tok := &corpusv1.JoinToken{
		Id:         id,
		SecretHash: secret.Hash(tokSecret),
		CreatedAt:  timestamppb.New(now),
		ExpiresAt:  timestamppb.New(now.Add(ttl)),
	}
	if req.Msg.Node != "" {
		// A rejoin token, for a node that is enrolled.
		view := s.b.Store.Read()
		if err := compat.Check(view.ClusterVersion(), compat.NodeRejoin); err != nil {
			return nil, api.ToConnect(err)
		}
		n := api.FindNode(view, req.Msg.Node)
		if n == nil {
			return nil, api.ToConnect(api.NotFound("node", req.Msg.Node, "corpus node list"))
		}
		tok.NodeId = n.Id
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_CreateJoinToken{
		CreateJoinToken: &corpusv1.CreateJoinToken{Token: tok},
	}}); err != nil {
		return nil, err
	}
	info := proto.Clone(tok).(*corpusv1.JoinToken)
	info.SecretHash = ""
	return connect.NewResponse(&corpusv1.CreateJoinTokenResponse{Token: id + "." + tokSecret + "." + s.b.CA.Signer().Pin(), Info: info}), nil
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
	n := api.FindNode(view, req.Msg.Name)
	if n == nil {
		return nil, api.ToConnect(api.NotFound("node", req.Msg.Name, "corpus node list"))
	}
	return connect.NewResponse(&corpusv1.GetNodeResponse{Node: nodeView(view, n)}), nil
}

// nodeView is a node as the API shows it: secrets removed, allocation added.
func nodeView(view *state.Snap, n *corpusv1.Node) *corpusv1.NodeView {
	guests := view.GuestsOnNode(n.Id)
	n = proto.Clone(n).(*corpusv1.Node)
	return &corpusv1.NodeView{Node: n, Allocated: view.NodeAllocated(n.Id), Guests: int32(len(guests))}
}

func (s *nodeService) SetNodeMode(ctx context.Context, req *connect.Request[corpusv1.SetNodeModeRequest]) (*connect.Response[corpusv1.SetNodeModeResponse], error) {
	m := req.Msg
	if err := names.Validate("node", m.Name); err != nil {
		return nil, api.ToConnect(err)
	}
	n := api.FindNode(s.b.Store.Read(), m.Name)
	if n == nil {
		return nil, api.ToConnect(api.NotFound("node", m.Name, "corpus node list"))
	}
	cmd := &corpusv1.SetNodeMode{NodeId: n.Id}
	changed := false
	switch m.Mode {
	case state.ModeDev, state.ModeStaging, state.ModeProd, state.ModeDrain:
		cmd.Mode, changed = m.Mode, n.Mode != m.Mode
	case corpusv1.Eligible, corpusv1.Ineligible:
		cmd.Eligibility, changed = m.Mode, n.Ineligible != (m.Mode == corpusv1.Ineligible)
	default:
		return nil, api.ToConnect(api.Invalidf("node mode %q: use dev, staging, prod, drain, eligible or ineligible", m.Mode))
	}
	if changed {
		if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetNodeMode{SetNodeMode: cmd}}); err != nil {
			return nil, err
		}
		s.b.Logger.Info("node mode set", "node", n.Name, "mode", m.Mode)
	}
	view := s.b.Store.Read()
	return connect.NewResponse(&corpusv1.SetNodeModeResponse{Node: nodeView(view, view.Node(n.Id)), Changed: changed}), nil
}

// Drain states of the guests left on a node (DrainGuest.state).
const (
	drainMoving   = "moving"
	drainWaiting  = "waiting"
	drainDeleting = "deleting"
	drainVolume   = "needs-volume-move"
)

func (s *nodeService) DrainStatus(ctx context.Context, req *connect.Request[corpusv1.DrainStatusRequest]) (*connect.Response[corpusv1.DrainStatusResponse], error) {
	m := req.Msg
	ctx, cancel := context.WithTimeout(ctx, api.WaitFor(m.WaitSeconds))
	defer cancel()
	for {
		view := s.b.Store.Read()
		n := api.FindNode(view, m.Name)
		if n == nil {
			return nil, api.ToConnect(api.NotFound("node", m.Name, "corpus node list"))
		}
		res := drainStatus(view, n)
		if m.MinIndex == 0 || res.Index > m.MinIndex {
			return connect.NewResponse(res), nil
		}
		// What drainStatus read is watched: wait for it to change.
		if err := view.Wait(ctx); err != nil {
			return connect.NewResponse(res), nil
		}
	}
}

// drainStatus lists what is left on a node: its guests, and the old
// copies of guests migrating away from it.
func drainStatus(view *state.Snap, n *corpusv1.Node) *corpusv1.DrainStatusResponse {
	res := &corpusv1.DrainStatusResponse{Node: nodeView(view, n), Index: view.Index(), Done: true}
	for _, g := range view.GuestsOnNode(n.Id) {
		dg := &corpusv1.DrainGuest{Name: g.Name, Status: api.GuestStatus(view, g)}
		switch {
		case g.DesiredState == state.DesiredDeleted:
			dg.State = drainDeleting
		case !view.Stateless(g):
			dg.State = drainVolume
			if v := view.VolumeOfGuest(g.Id); v != nil {
				dg.Volume = v.Name
			}
		default:
			dg.State = drainWaiting
			if n.Mode == state.ModeDrain {
				dg.Reason = scheduler.Explain(view, g).Reason
			}
		}
		res.Done = res.Done && dg.State == drainVolume
		res.Guests = append(res.Guests, dg)
	}
	for _, g := range view.GuestsLeaving(n.Id) {
		res.Done = false
		res.Guests = append(res.Guests, &corpusv1.DrainGuest{
			Name: g.Name, State: drainMoving, ToNode: view.Node(g.NodeId).GetName(), Status: api.GuestStatus(view, g),
		})
	}
	res.Empty = len(res.Guests) == 0
	return res
}

func (s *nodeService) RemoveNode(ctx context.Context, req *connect.Request[corpusv1.RemoveNodeRequest]) (*connect.Response[corpusv1.RemoveNodeResponse], error) {
	if err := names.Validate("node", req.Msg.Name); err != nil {
		return nil, api.ToConnect(err)
	}
	n := api.FindNode(s.b.Store.Read(), req.Msg.Name)
	if n == nil {
		return nil, api.ToConnect(api.NotFound("node", req.Msg.Name, "corpus node list"))
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_RemoveNode{RemoveNode: &corpusv1.RemoveNode{NodeId: n.Id}}}); err != nil {
		return nil, err
	}
	n = proto.Clone(n).(*corpusv1.Node)
	return connect.NewResponse(&corpusv1.RemoveNodeResponse{Node: n}), nil
}
