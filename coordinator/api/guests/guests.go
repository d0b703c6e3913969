// Package guests serves GuestService: guests created, read, updated,
// started, stopped and deleted, and exec, logs and shells in them.
package guests

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/api"
	"corpus/coordinator/auth"
	"corpus/coordinator/fit"
	"corpus/coordinator/state"
	"corpus/internal/names"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

const (
	maxStdin = 1 << 20
)

// New returns the handler of GuestService.
func New(b *api.Backend) corpusv1connect.GuestServiceHandler { return &guestService{b} }

type guestService struct{ b *api.Backend }

func (s *guestService) CreateGuest(ctx context.Context, req *connect.Request[corpusv1.CreateGuestRequest]) (*connect.Response[corpusv1.CreateGuestResponse], error) {
	m := proto.Clone(req.Msg).(*corpusv1.CreateGuestRequest)
	var spec *corpusv1.GuestSpec
	check := func() error {
		if err := names.Validate("guest", m.Name); err != nil {
			return err
		}
		spec = &corpusv1.GuestSpec{}
		if m.Spec != nil {
			spec = proto.Clone(m.Spec).(*corpusv1.GuestSpec)
		}
		return s.normalizeSpec(spec)
	}
	if err := check(); err != nil {
		return nil, api.ToConnect(err)
	}
	admitted, err := s.b.Admission().Admit(ctx, corpusv1.OnGuestCreate, m, check)
	if err != nil {
		return nil, err
	}
	desired := state.DesiredRunning
	if m.Stopped {
		desired = state.DesiredStopped
	}
	g := &corpusv1.Guest{Id: secret.Hex(8), Name: m.Name, Spec: spec, DesiredState: desired, Admission: admitted}
	_, err = s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_CreateGuest{CreateGuest: &corpusv1.CreateGuest{Guest: g}}})
	if errors.Is(err, state.ErrExists) {
		// Idempotent create: the same request again is a success.
		old := s.b.Store.Read().GuestByName(m.Name)
		if old != nil && old.DesiredState != state.DesiredDeleted && proto.Equal(old.Spec, spec) {
			return connect.NewResponse(&corpusv1.CreateGuestResponse{Guest: old, Created: false}), nil
		}
		return nil, connect.NewError(connect.CodeAlreadyExists,
			fmt.Errorf("guest %q already exists with a different spec or is being deleted; delete it first or choose another name", m.Name))
	}
	if err != nil {
		return nil, err
	}
	created := s.b.Store.Read().GuestByName(m.Name)
	return connect.NewResponse(&corpusv1.CreateGuestResponse{Guest: created, Created: true}), nil
}

// normalizeSpec is api.NormalizeSpec, and refuses an OCI image for a
// driver whose nodes run only the images it builds (fit.OCIRefusal), and
// a command for an image such a driver builds (fit.CommandRefusal).
func (s *guestService) normalizeSpec(spec *corpusv1.GuestSpec) error {
	if err := api.NormalizeSpec(spec); err != nil {
		return err
	}
	nodes := s.b.Store.Read().Nodes()
	if why := fit.OCIRefusal(nodes, spec); why != "" {
		return api.Invalidf("%s", why)
	}
	if why := fit.CommandRefusal(nodes, spec); why != "" {
		return api.Invalidf("%s", why)
	}
	return nil
}

func (s *guestService) GetGuest(ctx context.Context, req *connect.Request[corpusv1.GetGuestRequest]) (*connect.Response[corpusv1.GetGuestResponse], error) {
	m := req.Msg
	ctx, cancel := context.WithTimeout(ctx, api.WaitFor(m.WaitSeconds))
	defer cancel()
	for {
		view := s.b.Store.Read()
		g := view.GuestByName(m.Name)
		if g == nil {
			if m.MinIndex > 0 {
				return connect.NewResponse(&corpusv1.GetGuestResponse{Deleted: true}), nil
			}
			return nil, api.ToConnect(api.NotFound("guest", m.Name, "corpus guest list"))
		}
		if err := api.MaySee(ctx, auth.ScopeOf(view, auth.FromContext(ctx)).Guest(g), "guest", g.Name); err != nil {
			return nil, err
		}
		if g.ModifyIndex > m.MinIndex || m.MinIndex == 0 {
			return connect.NewResponse(s.guestView(view, g)), nil
		}
		if err := view.Wait(ctx); err != nil {
			// Waited long enough: answer with what is, like a blocking query.
			return connect.NewResponse(s.guestView(s.b.Store.Read(), g)), nil
		}
	}
}

func (s *guestService) guestView(view *state.Snap, g *corpusv1.Guest) *corpusv1.GetGuestResponse {
	res := &corpusv1.GetGuestResponse{Guest: g, Status: api.GuestStatus(view, g)}
	if n := view.Node(g.NodeId); n != nil {
		res.NodeName = n.Name
	}
	return res
}

func (s *guestService) ListGuests(ctx context.Context, req *connect.Request[corpusv1.ListGuestsRequest]) (*connect.Response[corpusv1.ListGuestsResponse], error) {
	view := s.b.Store.Read()
	guests := view.Guests()
	if req.Msg.Node != "" {
		n := api.FindNode(view, req.Msg.Node)
		if n == nil {
			return nil, api.ToConnect(api.NotFound("node", req.Msg.Node, "corpus node list"))
		}
		guests = view.GuestsOnNode(n.Id)
	}
	res := &corpusv1.ListGuestsResponse{Index: view.Index()}
	sc := auth.ScopeOf(view, auth.FromContext(ctx))
	for _, g := range guests {
		if sc.Guest(g) != auth.NoAccess {
			res.Guests = append(res.Guests, s.guestView(view, g))
		}
	}
	return connect.NewResponse(res), nil
}

func (s *guestService) setDesired(ctx context.Context, name, desired string, purge bool) (*connect.Response[corpusv1.GuestActionResponse], error) {
	if err := names.Validate("guest", name); err != nil {
		return nil, api.ToConnect(err)
	}
	view := s.b.Store.Read()
	before := view.GuestByName(name)
	if before != nil && before.DesiredState == desired && (!purge || before.PurgeVolume) {
		// "Nothing to change" is an answer from the state alone: from
		// the current state (a api.NotFound is run again by currentNotFound).
		var err error
		if view, err = s.b.Current(ctx); err != nil {
			return nil, err
		}
		before = view.GuestByName(name)
	}
	if before != nil {
		if err := api.MayUseGuest(ctx, view, before); err != nil {
			return nil, err
		}
	}
	if before == nil {
		return nil, api.ToConnect(api.NotFound("guest", name, "corpus guest list"))
	}
	if p, e := view.ProjectOfGuest(before.Id); p != nil && desired == state.DesiredDeleted {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"guest %s runs environment %s of project %s: delete the environment instead (corpus project delete %s --env %s)", name, e.Name, p.Name, p.Name, e.Name))
	}
	if svc := view.ServiceOfGuest(before.Id); svc != nil && desired == state.DesiredDeleted {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"guest %s runs service %s: delete the service instead (corpus service delete %s)", name, svc.Name, svc.Name))
	}
	if before.DesiredState == desired && (!purge || before.PurgeVolume) {
		return connect.NewResponse(&corpusv1.GuestActionResponse{Guest: before, Changed: false}), nil
	}
	_, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetGuestDesired{SetGuestDesired: &corpusv1.SetGuestDesired{
		Name: name, DesiredState: desired, PurgeVolume: purge,
	}}})
	if err != nil {
		return nil, err
	}
	after := s.b.Store.Read().GuestByName(name)
	return connect.NewResponse(&corpusv1.GuestActionResponse{Guest: after, Changed: true}), nil
}

func (s *guestService) StartGuest(ctx context.Context, req *connect.Request[corpusv1.GuestActionRequest]) (*connect.Response[corpusv1.GuestActionResponse], error) {
	return s.setDesired(ctx, req.Msg.Name, state.DesiredRunning, false)
}

func (s *guestService) StopGuest(ctx context.Context, req *connect.Request[corpusv1.GuestActionRequest]) (*connect.Response[corpusv1.GuestActionResponse], error) {
	return s.setDesired(ctx, req.Msg.Name, state.DesiredStopped, false)
}

func (s *guestService) DeleteGuest(ctx context.Context, req *connect.Request[corpusv1.GuestActionRequest]) (*connect.Response[corpusv1.GuestActionResponse], error) {
	return s.setDesired(ctx, req.Msg.Name, state.DesiredDeleted, req.Msg.PurgeVolume)
}

func (s *guestService) ExecGuest(ctx context.Context, req *connect.Request[corpusv1.ExecGuestRequest], stream *connect.ServerStream[corpusv1.ExecOutput]) error {
	m := req.Msg
	if err := names.Validate("guest", m.Name); err != nil {
		return api.ToConnect(err)
	}
	if len(m.Argv) == 0 {
		return api.ToConnect(api.Invalidf("no command given: corpus guest exec %s -- CMD ARGS", m.Name))
	}
	if len(m.Stdin) > maxStdin {
		return api.ToConnect(api.Invalidf("stdin of %d bytes is over the %d byte limit", len(m.Stdin), maxStdin))
	}
	g, n, err := s.execTarget(ctx, m.Name)
	if err != nil {
		return err
	}
	// Audited before it runs: an exec the log cannot record does not run.
	// The log names the program, not its arguments (they may hold
	// secrets).
	what := fmt.Sprintf("started %s with %d arguments", filepath.Base(m.Argv[0]), len(m.Argv)-1)
	if err := s.b.Audit().Record(ctx, auth.FromContext(ctx).String(), "exec_guest", g.Name, what); err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the exec could not be recorded in the audit log, so it was not run: %w", err))
	}
	up, err := s.b.AgentClient(n).Exec(ctx, connect.NewRequest(m))
	return api.RelayFromAgent(n, "exec", up, err, stream.Send)
}

// execTarget is a running guest the caller may use, and its node: where
// exec and shells go.
func (s *guestService) execTarget(ctx context.Context, name string) (*corpusv1.Guest, *corpusv1.Node, error) {
	view := s.b.Store.Read()
	g := view.GuestByName(name)
	if g == nil {
		return nil, nil, api.ToConnect(api.NotFound("guest", name, "corpus guest list"))
	}
	if err := api.MayUseGuest(ctx, view, g); err != nil {
		return nil, nil, err
	}
	if st := api.GuestStatus(view, g); st != state.ObservedRunning {
		return nil, nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("guest %q is %s, not running; start it with `corpus guest start %s`", g.Name, st, g.Name))
	}
	n := view.Node(g.NodeId)
	if n == nil || n.AgentAddress == "" {
		return nil, nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the node of guest %q has no agent address", g.Name))
	}
	return g, n, nil
}
