package projects

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"corpus/coordinator/api"

	"connectrpc.com/connect"

	"corpus/coordinator/audit"
	"corpus/coordinator/auth"
	"corpus/coordinator/keyring"
	"corpus/coordinator/state"
	"corpus/coordinator/state/auditentry"
	corpusv1 "corpus/proto/corpus/v1"
)

// Project config: set, unset, list; a change makes a release of the
// current commit through the node's pipeline.

func (s *Service) SetConfig(ctx context.Context, req *connect.Request[corpusv1.SetConfigRequest], stream *connect.ServerStream[corpusv1.DeployOutput]) error {
	m := req.Msg
	p, e, err := api.PickEnv(ctx, s.b.Store.Read(), m.Project, m.Env)
	if err != nil {
		return err
	}
	unset := slices.Compact(slices.Sorted(slices.Values(m.Unset)))
	if err := api.CheckConfigChange(m.Set, unset); err != nil {
		return api.ToConnect(err)
	}
	k, err := s.b.Keyring().Ensure(ctx)
	if err != nil {
		return api.ToConnect(err)
	}
	cmd := &corpusv1.SetConfig{Project: p.Name, Env: e.Name, Set: map[string][]byte{}, Unset: unset}
	for key, v := range m.Set {
		if cmd.Set[key], err = k.Seal([]byte(v), state.ConfigPlace(p.Name, e.Name, key)); err != nil {
			return api.ToConnect(err)
		}
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetConfig{SetConfig: cmd}}); err != nil {
		return err
	}
	keys := slices.Sorted(maps.Keys(m.Set))
	return s.ReleaseConfig(ctx, p.Name, e.Name, auditentry.ConfigChange(keys, unset), m.NoRestart, stream.Send)
}

// ReleaseConfig makes a release of an environment's current commit with
// its config as it now is (what says how it changed), unless noRestart
// or nothing is deployed yet; the output streams back.
func (s *Service) ReleaseConfig(ctx context.Context, project, env, what string, noRestart bool, send func(*corpusv1.DeployOutput) error) error {
	say := func(format string, args ...any) error {
		return send(&corpusv1.DeployOutput{Output: fmt.Appendf(nil, format+"\n", args...)})
	}
	view := s.b.Store.Read()
	p := view.Project(project)
	e := corpusv1.EnvNamed(p, env)
	if e == nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("environment %s/%s is gone", project, env))
	}
	switch {
	case noRestart:
		if err := say("config of %s/%s: %s; stored for the next deploy (--no-restart)", p.Name, e.Name, what); err != nil {
			return err
		}
		return send(&corpusv1.DeployOutput{Done: true, Current: e.GetCurrentRelease()})
	case e.GetCurrentRelease() == 0:
		if err := say("config of %s/%s: %s; nothing is deployed yet: the first push runs with it", p.Name, e.Name, what); err != nil {
			return err
		}
		return send(&corpusv1.DeployOutput{Done: true})
	}
	if err := say("config of %s/%s: %s; deploying it", p.Name, e.Name, what); err != nil {
		return err
	}
	return s.redeploy(ctx, view, p, e, &corpusv1.RedeployRequest{Project: p.Name, Env: e.Name, Trigger: corpusv1.TriggerConfig}, send)
}

// runningEnvNode is the node whose agent runs an environment's guest, for
// the calls that act in a running guest.
func runningEnvNode(view *state.Snap, p *corpusv1.Project, e *corpusv1.ProjectEnv) (*corpusv1.Node, error) {
	g := view.Guest(e.GuestId)
	if g == nil || api.GuestStatus(view, g) != state.ObservedRunning {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("the guest of %s/%s is not running", p.Name, e.Name))
	}
	n := view.Node(g.NodeId)
	if n == nil || n.AgentAddress == "" {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the node of %s/%s has no agent address", p.Name, e.Name))
	}
	return n, nil
}

// restartInstances restarts the processes of an environment's instances
// past the first, one after another, relaying what each agent says.
func (s *Service) restartInstances(ctx context.Context, view *state.Snap, p *corpusv1.Project, e *corpusv1.ProjectEnv, r *corpusv1.RedeployRequest, send func(*corpusv1.DeployOutput) error) error {
	for _, in := range e.Instances {
		g := view.Guest(in.GuestId)
		n := view.Node(g.GetNodeId())
		if g == nil || n == nil || n.AgentAddress == "" || api.GuestStatus(view, g) != state.ObservedRunning {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("instance %d (%s) is not running: the others were restarted", in.Index, in.GuestName))
		}
		up, err := s.b.AgentClient(n).Redeploy(ctx, connect.NewRequest(&corpusv1.AgentRedeployRequest{
			Request: r, Env: e, Releases: view.Releases(p.Name, e.Name), Author: auth.FromContext(ctx).String(), Instance: in.Index,
		}))
		if err := api.RelayFromAgent(n, r.Trigger, up, err, func(o *corpusv1.DeployOutput) error {
			if o.Done {
				return nil // the first instance's says it, at the end
			}
			return send(o)
		}); err != nil {
			return err
		}
	}
	return nil
}

// redeploy asks the environment's node for a release of its current
// commit and relays the output.
func (s *Service) redeploy(ctx context.Context, view *state.Snap, p *corpusv1.Project, e *corpusv1.ProjectEnv, r *corpusv1.RedeployRequest, send func(*corpusv1.DeployOutput) error) error {
	n, err := runningEnvNode(view, p, e)
	if err != nil {
		return err
	}
	up, err := s.b.AgentClient(n).Redeploy(ctx, connect.NewRequest(&corpusv1.AgentRedeployRequest{
		Request: r, Env: e, Releases: view.Releases(p.Name, e.Name), Author: auth.FromContext(ctx).String(),
	}))
	var done *corpusv1.DeployOutput
	err = api.RelayFromAgent(n, r.Trigger, up, err, func(o *corpusv1.DeployOutput) error {
		if o.Done && r.Trigger == corpusv1.TriggerRestart && len(e.Instances) > 0 {
			done = o // said once every instance restarted
			return nil
		}
		return send(o)
	})
	if err == nil && done != nil {
		// The other instances restart in turn, as a deploy rolls.
		if err = s.restartInstances(ctx, view, p, e, r, send); err == nil {
			err = send(done)
		}
	}
	result := "ok"
	if err != nil {
		result = "failed: " + audit.ErrorText(err)
	}
	if aerr := s.b.Audit().Record(ctx, auth.FromContext(ctx).String(), r.Trigger, p.Name+"/"+e.Name, result); aerr != nil {
		s.b.Logger.Warn("recording a redeploy in the audit log", "project", p.Name, "env", e.Name, "error", aerr)
	}
	return err
}

func (s *Service) GetConfig(ctx context.Context, req *connect.Request[corpusv1.GetConfigRequest]) (*connect.Response[corpusv1.GetConfigResponse], error) {
	m := req.Msg
	view := s.b.Store.Read()
	p, e, err := api.PickEnv(ctx, view, m.Project, m.Env)
	if err != nil {
		return nil, err
	}
	if m.Reveal {
		if pr := auth.FromContext(ctx); pr.Kind != auth.Operator && pr.Kind != auth.Dev {
			return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s may see config keys, not values: revealing needs ops or a dev granted %s", pr, p.Name))
		}
	}
	res := &corpusv1.GetConfigResponse{CurrentRelease: e.CurrentRelease}
	k, err := s.b.Keyring().Open(view)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	clear, err := keyring.OpenConfig(k, p.Name, e.Name, e.Config)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	for _, key := range slices.Sorted(maps.Keys(clear)) {
		v := &corpusv1.ConfigVar{Key: key, Bytes: int32(len(clear[key]))}
		if m.Reveal {
			v.Value = clear[key]
		}
		res.Vars = append(res.Vars, v)
	}
	if cur := view.ReleaseByNumber(p.Name, e.Name, e.CurrentRelease); cur != nil {
		running, err := keyring.OpenConfig(k, p.Name, e.Name, cur.Config)
		if err != nil {
			return nil, api.ToConnect(err)
		}
		res.Pending = !maps.Equal(running, clear)
	}
	return connect.NewResponse(res), nil
}

// validSteps are the steps corpus deploy --only may name.
var validSteps = []string{"archive", "install", "health", "fixperms", "notify"}

func (s *Service) Deploy(ctx context.Context, req *connect.Request[corpusv1.RedeployRequest], stream *connect.ServerStream[corpusv1.DeployOutput]) error {
	m := req.Msg
	view := s.b.Store.Read()
	p, e, err := api.PickEnv(ctx, view, m.Project, m.Env)
	if err != nil {
		return err
	}
	switch m.Trigger {
	case "", corpusv1.TriggerDeploy:
		m.Trigger = corpusv1.TriggerDeploy
		if len(m.Processes) > 0 {
			return api.ToConnect(api.Invalidf("processes are named for a restart, not a deploy"))
		}
	case corpusv1.TriggerRestart:
		if len(m.Only) > 0 {
			return api.ToConnect(api.Invalidf("a restart runs no steps; --only is for corpus deploy"))
		}
	default:
		return api.ToConnect(api.Invalidf("trigger %.40q: want deploy or restart", m.Trigger))
	}
	for _, st := range m.Only {
		if !slices.Contains(validSteps, st) {
			return api.ToConnect(api.Invalidf("step %.40q: corpus deploy --only takes %s", st, strings.Join(validSteps, ", ")))
		}
	}
	for _, proc := range m.Processes {
		if err := api.ValidProcessName(proc); err != nil {
			return api.ToConnect(err)
		}
	}
	if err := validStrategy(m.Strategy, m.KeepSeconds); err != nil {
		return api.ToConnect(err)
	}
	if m.Strategy == StrategyBlueGreen && m.Trigger != corpusv1.TriggerDeploy {
		return api.ToConnect(api.Invalidf("a restart is not blue-green: deploy with --strategy blue-green"))
	}
	if m.Image != "" {
		if err := checkImageDeploy(view, m); err != nil {
			return api.ToConnect(err)
		}
	} else if e.CurrentRelease == 0 {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s/%s has no release yet: push first, or deploy an image (corpus deploy %s --image REF)", p.Name, e.Name, p.Name))
	}
	if err := s.admitImageDeploy(ctx, view, e, m); err != nil {
		return err
	}
	return s.redeploy(ctx, view, p, e, &corpusv1.RedeployRequest{Project: p.Name, Env: e.Name, Trigger: m.Trigger, Only: m.Only, Processes: m.Processes,
		Strategy: m.Strategy, KeepSeconds: m.KeepSeconds, Image: m.Image}, stream.Send)
}

func (s *Service) ListProcesses(ctx context.Context, req *connect.Request[corpusv1.ListProcessesRequest]) (*connect.Response[corpusv1.ListProcessesResponse], error) {
	view := s.b.Store.Read()
	p, e, err := api.PickEnv(ctx, view, req.Msg.Project, req.Msg.Env)
	if err != nil {
		return nil, err
	}
	out := &corpusv1.ListProcessesResponse{}
	for _, in := range state.Instances(e) {
		g := view.Guest(in.GuestID)
		n := view.Node(g.GetNodeId())
		var err error
		switch {
		case g == nil || g.NodeId == "":
			err = fmt.Errorf("guest %s is not placed", in.GuestName)
		case n == nil || n.AgentAddress == "":
			err = fmt.Errorf("the node of guest %s has no agent address", in.GuestName)
		default:
			var res *connect.Response[corpusv1.ListProcessesResponse]
			res, err = s.b.AgentClient(n).Processes(ctx, connect.NewRequest(&corpusv1.ListProcessesRequest{Project: p.Name, Env: e.Name, Instance: in.Index}))
			if err == nil {
				out.Processes = append(out.Processes, res.Msg.Processes...)
				continue
			}
			err = fmt.Errorf("node %s: %w", n.Name, err)
		}
		if len(e.Instances) == 0 {
			return nil, connect.NewError(connect.CodeOf(err), err)
		}
		// One instance unreachable: the others' processes still show.
		out.Processes = append(out.Processes, &corpusv1.ProcessStatus{Instance: in.Index, Guest: in.GuestName, State: "unknown", LastExit: err.Error()})
	}
	return connect.NewResponse(out), nil
}

// Agent-side config calls.

func (s *Agent) SetWebPort(ctx context.Context, req *connect.Request[corpusv1.SetWebPortRequest]) (*connect.Response[corpusv1.SetWebPortResponse], error) {
	m := req.Msg
	if err := validRelease(m.Project, m.Env); err != nil {
		return nil, api.ToConnect(err)
	}
	if err := api.ValidPort("web port", m.Port); err != nil {
		return nil, api.ToConnect(err)
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetWebPort{SetWebPort: &corpusv1.SetWebPort{
		Project: m.Project, Env: m.Env, NodeId: auth.FromContext(ctx).NodeID, Port: m.Port, Instance: m.Instance,
	}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.SetWebPortResponse{}), nil
}
