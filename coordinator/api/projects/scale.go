package projects

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"corpus/coordinator/api"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/auth"
	"corpus/coordinator/keyring"
	"corpus/coordinator/state"
	"corpus/internal/names"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
)

// Scale: process counts per type and the guests they ask for. The API
// decides the new guests (names, specs) and the state machine checks them
// against the environment as it is when the write applies.

func (s *Service) Scale(ctx context.Context, req *connect.Request[corpusv1.ScaleRequest]) (*connect.Response[corpusv1.ScaleResponse], error) {
	m := req.Msg
	view := s.b.Store.Read()
	p, e, err := api.PickEnv(ctx, view, m.Project, m.Env)
	if err != nil {
		return nil, err
	}
	if len(m.Counts) == 0 && m.MaxParallel == 0 && !m.SharedNothing {
		return nil, api.ToConnect(api.Invalidf("nothing to scale: name process counts (web=3 worker=1)"))
	}
	for name, n := range m.Counts {
		if err := api.ValidProcessName(name); err != nil {
			return nil, api.ToConnect(err)
		}
		if n > state.MaxInstances {
			return nil, api.ToConnect(api.Invalidf("%s=%d: at most %d instances", name, n, state.MaxInstances))
		}
	}
	if m.MaxParallel > state.MaxInstances {
		return nil, api.ToConnect(api.Invalidf("--max-parallel %d: at most %d", m.MaxParallel, state.MaxInstances))
	}
	cmd, changed, err := scaleCommand(view, p, e, m.Counts, m.SharedNothing, m.MaxParallel)
	if errors.Is(err, errLeftover) {
		// Scaled up right after a scale-down: what the removed
		// instances left is being deleted on its node, within seconds.
		cmd, changed, err = s.awaitLeftovers(ctx, p.Name, e.Name, m)
	}
	if err != nil {
		return nil, err
	}
	if changed {
		if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_ScaleEnv{ScaleEnv: cmd}}); err != nil {
			return nil, err
		}
	}
	// Instance 1 is restarted when a type starts or stops there; the
	// others' agents see what they run from the state.
	restart := false
	for t := range cmd.Scale {
		if corpusv1.RunsOn(cmd.Scale, 1, t) != corpusv1.RunsOn(e.Scale, 1, t) {
			restart = true
		}
	}
	if changed && restart && e.CurrentRelease != 0 {
		view := s.b.Store.Read()
		p := view.Project(p.Name)
		e := corpusv1.EnvNamed(p, e.Name)
		err := s.redeploy(ctx, view, p, e, &corpusv1.RedeployRequest{Project: p.Name, Env: e.Name, Trigger: corpusv1.TriggerRestart},
			func(*corpusv1.DeployOutput) error { return nil })
		if err != nil {
			return nil, connect.NewError(connect.CodeOf(err), fmt.Errorf("scaled to %s, but restarting instance 1 with its new processes failed: %w", corpusv1.ScaleText(cmd.Scale), err))
		}
	}
	view = s.b.Store.Read()
	return connect.NewResponse(&corpusv1.ScaleResponse{Project: s.view(view, view.Project(p.Name)), Instances: corpusv1.InstanceCount(cmd.Scale), Changed: changed}), nil
}

// errLeftover: a new instance's guest or volume name is still held by
// one of an instance removed before, being deleted on its node.
var errLeftover = errors.New("left by an instance removed before")

// leftoverWait bounds how long a scale waits for what instances removed
// just before left behind.
const leftoverWait = 30 * time.Second

// awaitLeftovers makes the scale command of m again after each change
// to the state until no new instance waits for an old one's leftovers,
// or leftoverWait; a caller's deadline shortens the wait so that the
// answer saying why reaches the caller before it gives up (a tenth of
// its time, at least a second, is left for that).
func (s *Service) awaitLeftovers(ctx context.Context, project, env string, m *corpusv1.ScaleRequest) (*corpusv1.ScaleEnv, bool, error) {
	wait := leftoverWait
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		wait = min(wait, left-max(left/10, time.Second))
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		view := s.b.Store.Read()
		view.WatchIndex()
		p, e, err := api.PickEnv(ctx, view, project, env)
		if err != nil {
			return nil, false, err
		}
		cmd, changed, err := scaleCommand(view, p, e, m.Counts, m.SharedNothing, m.MaxParallel)
		if !errors.Is(err, errLeftover) {
			return cmd, changed, err
		}
		if view.Wait(ctx) != nil {
			return nil, false, err
		}
	}
}

// leftover names what an instance removed before left with the name of
// a new one, still being deleted on its node ("" when nothing): its
// guest, or the volume of its own it had (--shared-nothing).
func leftover(view *state.Snap, name string) string {
	if g := view.GuestByName(name); g != nil && g.DesiredState == state.DesiredDeleted {
		return "guest " + name
	}
	if v := view.Volume(name); v != nil && v.GuestId == "" && v.DesiredState == state.VolumeDeleted {
		return "volume " + name
	}
	return ""
}

// scaleCommand is the write that scales an environment to counts (types
// not named keep theirs): the new guests named and specified, the
// highest instances removed. changed is false when it is so already.
func scaleCommand(view *state.Snap, p *corpusv1.Project, e *corpusv1.ProjectEnv, counts map[string]uint32, sharedNothing bool, maxParallel uint32) (*corpusv1.ScaleEnv, bool, error) {
	scale := maps.Clone(e.Scale)
	if scale == nil {
		scale = map[string]uint32{}
	}
	maps.Copy(scale, counts)
	shared := sharedNothing || e.SharedNothing
	have, want := uint32(len(e.Instances))+1, corpusv1.InstanceCount(scale)
	primary := view.Guest(e.GuestId)
	if primary == nil {
		return nil, false, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s/%s has no guest", p.Name, e.Name))
	}
	vol := view.VolumeOfGuest(primary.Id)
	if want > 1 && !shared && (vol != nil || primary.GetSpec().GetVolume() != nil) {
		where := "its volume"
		if vol != nil {
			where = "volume " + vol.Name
		}
		return nil, false, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"%s/%s keeps its data on %s, which only one instance may write; to run %d instances, each with an empty volume of its own (nothing shared between them), scale with --shared-nothing",
			p.Name, e.Name, where, want))
	}
	cmd := &corpusv1.ScaleEnv{Project: p.Name, Env: e.Name, Scale: scale, SharedNothing: shared, MaxParallel: maxParallel, ExpectInstances: have}
	for i := have + 1; i <= want; i++ {
		name := corpusv1.InstanceGuestName(p.Name, e.Name, i)
		if err := names.Validate("guest", name); err != nil {
			return nil, false, api.ToConnect(api.Invalidf("project name %q is too long for its instance's guest name %q", p.Name, name))
		}
		if what := leftover(view, name); what != "" {
			return nil, false, connect.NewError(connect.CodeUnavailable, fmt.Errorf(
				"instance %d of %s/%s cannot be made yet: the %s of the instance %d removed before is still being deleted on its node; try again in a moment: %w",
				i, p.Name, e.Name, what, i, errLeftover))
		}
		if view.GuestByName(name) != nil {
			return nil, false, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("guest %s exists (not an instance of %s/%s): delete it or rename it first", name, p.Name, e.Name))
		}
		spec := proto.Clone(primary.Spec).(*corpusv1.GuestSpec)
		if v := spec.GetVolume(); v != nil || vol != nil {
			size := v.GetSizeBytes()
			if vol != nil {
				size = vol.SizeBytes
			}
			spec.Volume = &corpusv1.VolumeSpec{SizeBytes: size, Path: ProjectsRoot + "/" + p.Name + "/data"}
		}
		cmd.Add = append(cmd.Add, &corpusv1.Guest{Id: secret.Hex(8), Name: name, Spec: spec, DesiredState: state.DesiredRunning})
	}
	for i := have; i > want; i-- {
		cmd.Remove = append(cmd.Remove, i)
	}
	changed := len(cmd.Add) > 0 || len(cmd.Remove) > 0 || !maps.Equal(scale, e.Scale) || shared != e.SharedNothing ||
		(maxParallel != 0 && maxParallel != e.MaxParallel)
	return cmd, changed, nil
}

// instanceViews describes every guest of an environment.
func instanceViews(view *state.Snap, p *corpusv1.Project, e *corpusv1.ProjectEnv) []*corpusv1.InstanceView {
	var procs []string
	if r := view.ReleaseByNumber(p.Name, e.Name, e.CurrentRelease); r != nil {
		procs = r.Processes
	}
	var out []*corpusv1.InstanceView
	for _, in := range state.Instances(e) {
		iv := &corpusv1.InstanceView{Index: in.Index, GuestName: in.GuestName, Release: in.Release}
		if g := view.Guest(in.GuestID); g != nil {
			iv.GuestStatus, iv.Address = api.GuestStatus(view, g), g.Address
			if g.NodeId == "" {
				iv.PendingReason = g.PendingReason
			}
			if n := view.Node(g.NodeId); n != nil {
				iv.NodeName = n.Name
			}
			if in.Index > 1 {
				// What its agent says serves there, not what should.
				iv.Release, iv.Error = g.GetObserved().GetRelease(), g.GetObserved().GetReleaseError()
			}
		}
		for _, t := range procs {
			if corpusv1.RunsOn(e.Scale, in.Index, t) {
				iv.Processes = append(iv.Processes, t)
			}
		}
		out = append(out, iv)
	}
	return out
}

// The agents' side: the agent that deploys an environment rolls each
// other instance through these calls; an instance's agent takes what it
// deploys from them.

// instanceOf returns an environment's instance index (2…) or an error.
func instanceOf(view *state.Snap, project, env string, index uint32) (*corpusv1.Project, *corpusv1.ProjectEnv, *corpusv1.Guest, error) {
	if err := validRelease(project, env); err != nil {
		return nil, nil, nil, api.ToConnect(err)
	}
	p := view.Project(project)
	e := corpusv1.EnvNamed(p, env)
	if e == nil {
		return nil, nil, nil, api.ToConnect(api.NotFound("environment", project+"/"+env, "corpus project list"))
	}
	for _, in := range state.Instances(e) {
		if in.Index == index && index > 1 {
			return p, e, view.Guest(in.GuestID), nil
		}
	}
	return nil, nil, nil, api.ToConnect(api.NotFound("instance", fmt.Sprintf("%s/%s #%d", project, env, index), "corpus project show "+project))
}

// RollInstance is called by the agent of instance 1 (the one a deploy
// runs on).
func (s *Agent) RollInstance(ctx context.Context, req *connect.Request[corpusv1.RollInstanceRequest]) (*connect.Response[corpusv1.RollInstanceResponse], error) {
	m := req.Msg
	caller := auth.FromContext(ctx)
	view := s.b.Store.Read()
	p, e, g, err := instanceOf(view, m.Project, m.Env, m.Instance)
	if err != nil {
		return nil, err
	}
	if pg := view.Guest(e.GuestId); pg == nil || pg.NodeId != caller.NodeID {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("only the node of %s/%s's first instance rolls the others", p.Name, e.Name))
	}
	if m.Release != 0 && view.ReleaseByNumber(p.Name, e.Name, m.Release) == nil {
		return nil, api.ToConnect(api.NotFound("release", corpusv1.ReleaseName(m.Release), "corpus releases "+p.Name))
	}
	res, err := rollInstance(ctx, s.b, p, e, g, m.Instance, m.Release, m.Stage, time.Duration(m.WaitSeconds)*time.Second)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

// rollInstance sets the release an instance (guest g) should serve and
// waits until its agent says it does, or why not. The release is set
// even when the caller leaves meanwhile: the first instance serves it
// already, and the others follow it.
func rollInstance(ctx context.Context, b *api.Backend, p *corpusv1.Project, e *corpusv1.ProjectEnv, g *corpusv1.Guest, index, release uint32, stage bool, wait time.Duration) (*corpusv1.RollInstanceResponse, error) {
	if _, err := b.Write(context.WithoutCancel(ctx), &corpusv1.Command{Cmd: &corpusv1.Command_SetInstanceRelease{SetInstanceRelease: &corpusv1.SetInstanceRelease{
		Project: p.Name, Env: e.Name, Instance: index, Release: release, Stage: stage,
	}}}); err != nil {
		return nil, err
	}
	if release == 0 {
		return &corpusv1.RollInstanceResponse{Guest: g.GetName()}, nil // nothing to serve: nothing to wait for
	}
	if wait <= 0 || wait > 30*time.Minute {
		wait = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	prefix := corpusv1.ReleaseName(release) + ": "
	for {
		view := b.Store.Read()
		g = view.Guest(g.GetId())
		if g == nil || g.DesiredState == state.DesiredDeleted {
			return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("instance %d of %s/%s was removed", index, p.Name, e.Name))
		}
		res := &corpusv1.RollInstanceResponse{Guest: g.Name}
		if n := view.Node(g.NodeId); n != nil {
			res.Node = n.Name
		}
		o := g.GetObserved()
		switch {
		case !stage && o.GetRelease() == release && o.GetReleaseError() == "":
			return res, nil
		case stage && o.GetStagedRelease() == release && o.GetReleaseError() == "":
			return res, nil
		case strings.HasPrefix(o.GetReleaseError(), prefix):
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("instance %d (%s on %s): %s", index, g.Name, res.Node, strings.TrimPrefix(o.ReleaseError, prefix)))
		}
		if err := view.Wait(ctx); err != nil {
			why := "is not running"
			if g.NodeId != "" && api.GuestStatus(view, g) == state.ObservedRunning {
				why = "serves " + corpusv1.ReleaseName(o.GetRelease())
			}
			return nil, connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("instance %d (%s) did not serve %s within %s: it %s", index, g.Name, corpusv1.ReleaseName(release), wait, why))
		}
	}
}

// rollInstances brings every instance past the first to release, all at
// once (a rollback: each holds the release already), saying so.
func rollInstances(ctx context.Context, b *api.Backend, p *corpusv1.Project, e *corpusv1.ProjectEnv, release uint32, say func(string)) error {
	view := b.Store.Read()
	errs := make([]error, len(e.Instances))
	done := make(chan struct{})
	for i, in := range e.Instances {
		go func() {
			defer func() { done <- struct{}{} }()
			res, err := rollInstance(ctx, b, p, e, view.Guest(in.GuestId), in.Index, release, false, 5*time.Minute)
			if err != nil {
				errs[i] = err
				return
			}
			say(fmt.Sprintf("       instance %d (%s on %s) serves %s\n", in.Index, res.Guest, res.Node, corpusv1.ReleaseName(release)))
		}()
	}
	for range e.Instances {
		<-done
	}
	return errors.Join(errs...)
}

// InstanceRelease is called by the agent of an instance.
func (s *Agent) InstanceRelease(ctx context.Context, req *connect.Request[corpusv1.InstanceReleaseRequest]) (*connect.Response[corpusv1.InstanceReleaseResponse], error) {
	m := req.Msg
	view := s.b.Store.Read()
	p, e, g, err := instanceOf(view, m.Project, m.Env, m.Instance)
	if err != nil {
		return nil, err
	}
	if g == nil || g.NodeId != auth.FromContext(ctx).NodeID {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("instance %d of %s/%s is not on this node", m.Instance, p.Name, e.Name))
	}
	var want uint32
	for _, in := range e.Instances {
		if in.Index == m.Instance {
			want = in.Release
			if m.Staged {
				want = in.StagedRelease
			}
		}
	}
	res := &corpusv1.InstanceReleaseResponse{Env: e, Releases: withoutLogs(view.Releases(p.Name, e.Name))}
	if res.Release = view.ReleaseByNumber(p.Name, e.Name, want); res.Release == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("instance %d of %s/%s has no release to serve yet", m.Instance, p.Name, e.Name))
	}
	res.Release = forClients(res.Release)
	k, err := s.b.Keyring().Open(view)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	if res.Config, err = keyring.OpenConfig(k, p.Name, e.Name, e.Config); err != nil {
		return nil, api.ToConnect(err)
	}
	return connect.NewResponse(res), nil
}

// ReleaseSource relays a commit's tree from the node of instance 1 to
// the agent of another instance.
func (s *Agent) ReleaseSource(ctx context.Context, req *connect.Request[corpusv1.ReleaseSourceRequest], stream *connect.ServerStream[corpusv1.SourceChunk]) error {
	m := req.Msg
	view := s.b.Store.Read()
	if err := validRelease(m.Project, m.Env); err != nil {
		return api.ToConnect(err)
	}
	p := view.Project(m.Project)
	e := corpusv1.EnvNamed(p, m.Env)
	if e == nil {
		return api.ToConnect(api.NotFound("environment", m.Project+"/"+m.Env, "corpus project list"))
	}
	caller := auth.FromContext(ctx)
	if !slices.Contains(view.EnvNodes(e), caller.NodeID) {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("no instance of %s/%s is on node %s", p.Name, e.Name, caller.NodeName))
	}
	known := false
	for _, r := range view.Releases(p.Name, e.Name) {
		known = known || r.Commit == m.Commit
	}
	if !known {
		return api.ToConnect(api.NotFound("release of commit", m.Commit, "corpus releases "+p.Name))
	}
	n, err := runningEnvNode(view, p, e)
	if err != nil {
		return err
	}
	up, err := s.b.AgentClient(n).ReleaseSource(ctx, connect.NewRequest(m))
	err = api.RelayFromAgent(n, "release source", up, err, stream.Send)
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		return connect.NewError(connect.CodeCanceled, err)
	}
	return err
}
