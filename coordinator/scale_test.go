package coordinator_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

func init() {
	for proc, call := range map[string]func(context.Context, clients) error{
		corpusv1connect.ProjectServiceScaleProcedure: func(ctx context.Context, c clients) error {
			_, err := c.project.Scale(ctx, connect.NewRequest(&corpusv1.ScaleRequest{Project: "nope", Counts: map[string]uint32{"web": 2}}))
			return err
		},
		corpusv1connect.ProjectServiceAutoscaleProcedure: func(ctx context.Context, c clients) error {
			_, err := c.project.Autoscale(ctx, connect.NewRequest(&corpusv1.AutoscaleRequest{Project: "nope", Process: "web", Min: 1, Max: 2, TargetRps: 10}))
			return err
		},
		corpusv1connect.ProjectServiceSwitchBackProcedure: func(ctx context.Context, c clients) error {
			_, err := c.project.SwitchBack(ctx, connect.NewRequest(&corpusv1.SwitchBackRequest{Project: "nope"}))
			return err
		},
		corpusv1connect.AgentServiceSwitchEnvProcedure: func(ctx context.Context, c clients) error {
			_, err := c.agent.SwitchEnv(ctx, connect.NewRequest(&corpusv1.SwitchEnvRequest{Project: "nope", Env: "dev", Release: 1, WebPort: 81}))
			return err
		},
		corpusv1connect.AgentServiceRollInstanceProcedure: func(ctx context.Context, c clients) error {
			_, err := c.agent.RollInstance(ctx, connect.NewRequest(&corpusv1.RollInstanceRequest{Project: "nope", Env: "dev", Instance: 2, Release: 1}))
			return err
		},
		corpusv1connect.AgentServiceInstanceReleaseProcedure: func(ctx context.Context, c clients) error {
			_, err := c.agent.InstanceRelease(ctx, connect.NewRequest(&corpusv1.InstanceReleaseRequest{Project: "nope", Env: "dev", Instance: 2}))
			return err
		},
		corpusv1connect.AgentServiceReleaseSourceProcedure: func(ctx context.Context, c clients) error {
			return firstMessage(c.agent.ReleaseSource(ctx, connect.NewRequest(&corpusv1.ReleaseSourceRequest{Project: "nope", Env: "dev", Commit: testCommit})))
		},
	} {
		authCalls[proc] = call
	}
}

// TestScale: an environment scaled to three instances gets two more
// guests, spread over the nodes, its domains routed to every instance's
// web on each of their nodes; a data volume needs --shared-nothing; the
// first instance's node rolls the others and hears how each did; scaling
// down removes the highest instances.
func TestScale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, t.TempDir())
	nodes := map[string]*agent{}
	for _, n := range []string{"n1", "n2", "n3"} {
		nodes[n] = s.enroll(n)
		nodes[n].report(t)
	}
	ops := s.ops()
	if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "site", Env: "dev", Domains: []string{"site.example.test"}})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("the first instance placed", func(v *state.Snap) bool { return v.GuestByName("site-dev").GetAddress() != "" })
	before := s.Store().Read().Index()
	_, err := ops.project.Scale(ctx, connect.NewRequest(&corpusv1.ScaleRequest{Project: "site", Counts: map[string]uint32{"web": 3}}))
	if codeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "--shared-nothing") {
		t.Fatalf("scaling an environment with a data volume = %v; want FailedPrecondition naming --shared-nothing", err)
	}
	if p := s.Store().Read().Project("site"); len(p.Envs[0].Instances) != 0 || len(p.Envs[0].Scale) != 0 {
		t.Fatalf("a refused scale changed the environment: %v (index %d before)", p.Envs[0], before)
	}
	if _, err := ops.project.Autoscale(ctx, connect.NewRequest(&corpusv1.AutoscaleRequest{Project: "site", Process: "web", Min: 1, Max: 3, TargetRps: 50})); codeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("autoscaling an environment with a data volume past one = %v; want FailedPrecondition", err)
	}
	for _, bad := range []*corpusv1.AutoscaleRequest{
		{Process: "web", Min: 0, Max: 3, TargetRps: 50},
		{Process: "web", Min: 3, Max: 2, TargetRps: 50},
		{Process: "web", Min: 1, Max: 3},
		{Process: "web", Min: 1, Max: 3, TargetRps: 5, TargetCpuPercent: 50},
		{Process: "web", Min: 1, Max: 3, TargetCpuPercent: 150},
		{Process: "Web", Min: 1, Max: 3, TargetRps: 5},
	} {
		bad.Project = "site"
		if _, err := ops.project.Autoscale(ctx, connect.NewRequest(bad)); codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Autoscale(%v) = %v; want InvalidArgument", bad, err)
		}
	}
	for _, bad := range []map[string]uint32{{"Web": 2}, {"web": state.MaxInstances + 1}} {
		if _, err := ops.project.Scale(ctx, connect.NewRequest(&corpusv1.ScaleRequest{Project: "site", Counts: bad, SharedNothing: true})); codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Scale(%v) = %v; want InvalidArgument", bad, err)
		}
	}

	res, err := ops.project.Scale(ctx, connect.NewRequest(&corpusv1.ScaleRequest{Project: "site", Counts: map[string]uint32{"web": 3, "worker": 1}, SharedNothing: true, MaxParallel: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Msg.Changed || res.Msg.Instances != 3 {
		t.Fatalf("Scale = %v", res.Msg)
	}
	s.waitFor("three instances placed on three nodes", func(v *state.Snap) bool {
		e := corpusv1.EnvNamed(v.Project("site"), "dev")
		on := map[string]bool{}
		for _, in := range state.Instances(e) {
			if g := v.Guest(in.GuestID); g.GetAddress() != "" {
				on[g.NodeId] = true
			}
		}
		return len(on) == 3
	})
	again, err := ops.project.Scale(ctx, connect.NewRequest(&corpusv1.ScaleRequest{Project: "site", Counts: map[string]uint32{"web": 3}}))
	if err != nil || again.Msg.Changed {
		t.Errorf("the same scale again = %v, %v; want no change", again, err)
	}
	v := s.Store().Read()
	e := corpusv1.EnvNamed(v.Project("site"), "dev")
	if e.MaxParallel != 2 || !e.SharedNothing || e.Instances[0].GuestName != "site-dev-2" || e.Instances[1].GuestName != "site-dev-3" {
		t.Errorf("environment = %v", e)
	}
	if vol := v.VolumeOfGuest(e.Instances[0].GuestId); vol == nil {
		t.Errorf("instance 2 has no volume of its own")
	}
	// ps asks every instance's agent; these test agents answer nothing, so
	// each instance shows as unknown, with why, rather than failing all.
	ps, err := ops.project.ListProcesses(ctx, connect.NewRequest(&corpusv1.ListProcessesRequest{Project: "site"}))
	if err != nil || len(ps.Msg.Processes) != 3 || ps.Msg.Processes[2].Guest != "site-dev-3" || ps.Msg.Processes[2].State != "unknown" || ps.Msg.Processes[2].LastExit == "" {
		t.Errorf("ps of three instances without agents = %v, %v", ps, err)
	}
	views := res.Msg.Project.Envs[0].Instances
	if len(views) != 3 || views[1].GuestName != "site-dev-2" {
		t.Errorf("instances shown = %v", views)
	}

	// The first instance's node rolls the others to a release.
	first := nodes[v.Node(v.GuestByName("site-dev").NodeId).Name]
	second := nodes[v.Node(v.GuestByName("site-dev-2").NodeId).Name]
	rel, err := first.agent.BeginRelease(ctx, connect.NewRequest(&corpusv1.BeginReleaseRequest{Project: "site", Env: "dev", Commit: testCommit}))
	if err != nil {
		t.Fatal(err)
	}
	n := rel.Msg.Release.Number
	if _, err := second.agent.RollInstance(ctx, connect.NewRequest(&corpusv1.RollInstanceRequest{Project: "site", Env: "dev", Instance: 2, Release: n})); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("another node rolls an instance: %v; want PermissionDenied", err)
	}
	if _, err := first.agent.InstanceRelease(ctx, connect.NewRequest(&corpusv1.InstanceReleaseRequest{Project: "site", Env: "dev", Instance: 2})); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a node without the instance takes its release: %v; want PermissionDenied", err)
	}
	g2 := v.GuestByName("site-dev-2")
	done := make(chan error, 1)
	go func() {
		_, err := first.agent.RollInstance(ctx, connect.NewRequest(&corpusv1.RollInstanceRequest{Project: "site", Env: "dev", Instance: 2, Release: n, WaitSeconds: 30}))
		done <- err
	}()
	s.waitFor("instance 2 asked for the release", func(v *state.Snap) bool {
		return corpusv1.EnvNamed(v.Project("site"), "dev").Instances[0].Release == n
	})
	ir, err := second.agent.InstanceRelease(ctx, connect.NewRequest(&corpusv1.InstanceReleaseRequest{Project: "site", Env: "dev", Instance: 2}))
	if err != nil || ir.Msg.Release.Number != n {
		t.Fatalf("InstanceRelease = %v, %v", ir, err)
	}
	second.report(t, &corpusv1.ReportedGuest{GuestId: g2.Id, Observed: &corpusv1.GuestObserved{State: "running", Pid: 7, Release: n}})
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RollInstance = %v", err)
		}
	case <-time.After(testrun.D(20 * time.Second)):
		t.Fatal("RollInstance did not hear the instance serve")
	}
	// Every node with an instance routes the domain to the instances that
	// serve something: the first, and the second now.
	v = s.Store().Read()
	for _, n := range nodes {
		var route *corpusv1.Route
		for _, r := range v.RoutesOnNode(n.id) {
			if r.Domain == "site.example.test" {
				route = r
			}
		}
		want := []string{v.GuestByName("site-dev").Address + ":80", g2.Address + ":80"}
		if route == nil || !slices.Equal(route.Targets, want) {
			t.Errorf("node %s routes the domain as %v; want targets %v", n.name, route, want)
		}
	}
	// A failure comes back with the agent's words.
	second.report(t, &corpusv1.ReportedGuest{GuestId: g2.Id, Observed: &corpusv1.GuestObserved{State: "running", Pid: 7, Release: n - 1, ReleaseError: corpusv1.ReleaseName(n) + ": install: boom"}})
	if _, err := first.agent.RollInstance(ctx, connect.NewRequest(&corpusv1.RollInstanceRequest{Project: "site", Env: "dev", Instance: 2, Release: n, WaitSeconds: 30})); codeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "install: boom") {
		t.Errorf("RollInstance of a failing instance = %v", err)
	}

	// An autoscale policy is kept with the environment, and removed.
	if _, err := ops.project.Autoscale(ctx, connect.NewRequest(&corpusv1.AutoscaleRequest{Project: "site", Process: "web", Min: 2, Max: 5, TargetCpuPercent: 60, ScaleDownWindowSeconds: 30})); err != nil {
		t.Fatal(err)
	}
	if pol := corpusv1.EnvNamed(s.Store().Read().Project("site"), "dev").Autoscale["web"]; pol.GetMax() != 5 || pol.GetTargetCpuPercent() != 60 {
		t.Errorf("policy = %v", pol)
	}
	if _, err := ops.project.Autoscale(ctx, connect.NewRequest(&corpusv1.AutoscaleRequest{Project: "site", Process: "web", Off: true})); err != nil {
		t.Fatal(err)
	}
	if pols := corpusv1.EnvNamed(s.Store().Read().Project("site"), "dev").Autoscale; len(pols) != 0 {
		t.Errorf("policies after off = %v", pols)
	}

	// Blue-green: the switch needs every instance staged; then every
	// instance's port moves in one write, and back.
	if _, err := ops.project.SwitchBack(ctx, connect.NewRequest(&corpusv1.SwitchBackRequest{Project: "site"})); codeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("switch back without a standby = %v; want FailedPrecondition", err)
	}
	if _, err := first.agent.FinishRelease(ctx, connect.NewRequest(&corpusv1.FinishReleaseRequest{Id: rel.Msg.Release.Id, Status: corpusv1.ReleaseSucceeded})); err != nil {
		t.Fatal(err)
	}
	rel2, err := first.agent.BeginRelease(ctx, connect.NewRequest(&corpusv1.BeginReleaseRequest{Project: "site", Env: "dev", Commit: testCommit}))
	if err != nil {
		t.Fatal(err)
	}
	n2 := rel2.Msg.Release.Number
	if _, err := first.agent.SwitchEnv(ctx, connect.NewRequest(&corpusv1.SwitchEnvRequest{Project: "site", Env: "dev", Release: n2, WebPort: 81})); codeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("a switch before the instances staged = %v; want FailedPrecondition", err)
	}
	v = s.Store().Read()
	var staged []*corpusv1.ReportedGuest
	for _, in := range corpusv1.EnvNamed(v.Project("site"), "dev").Instances {
		go first.agent.RollInstance(ctx, connect.NewRequest(&corpusv1.RollInstanceRequest{Project: "site", Env: "dev", Instance: in.Index, Release: n2, Stage: true, WaitSeconds: 30}))
		staged = append(staged, &corpusv1.ReportedGuest{GuestId: in.GuestId, Observed: &corpusv1.GuestObserved{State: "running", Pid: 7, Release: n, StagedRelease: n2, StagedPort: 81}})
	}
	s.waitFor("both instances asked to stage", func(v *state.Snap) bool {
		ins := corpusv1.EnvNamed(v.Project("site"), "dev").Instances
		return ins[0].StagedRelease == n2 && ins[1].StagedRelease == n2
	})
	for _, r := range staged {
		g := v.Guest(r.GuestId)
		nodes[v.Node(g.NodeId).Name].report(t, r)
	}
	if _, err := first.agent.SwitchEnv(ctx, connect.NewRequest(&corpusv1.SwitchEnvRequest{Project: "site", Env: "dev", Release: n2, WebPort: 81, KeepSeconds: 600})); err != nil {
		t.Fatalf("SwitchEnv = %v", err)
	}
	e = corpusv1.EnvNamed(s.Store().Read().Project("site"), "dev")
	if e.CurrentRelease != n2 || e.StandbyRelease == n2 || e.WebPort != 81 || e.StandbyWebPort != 80 || e.Instances[0].WebPort != 81 || e.Instances[0].StandbyWebPort != 80 || e.Instances[1].Release != n2 {
		t.Errorf("after the switch: %v", e)
	}
	if _, err := ops.project.SwitchBack(ctx, connect.NewRequest(&corpusv1.SwitchBackRequest{Project: "site"})); err != nil {
		t.Fatal(err)
	}
	e = corpusv1.EnvNamed(s.Store().Read().Project("site"), "dev")
	if e.CurrentRelease == n2 || e.StandbyRelease != n2 || e.WebPort != 80 || e.Instances[0].WebPort != 80 || e.Instances[0].StandbyWebPort != 81 {
		t.Errorf("after switching back: %v", e)
	}

	// Scale down: the highest instances go.
	if _, err := ops.project.Scale(ctx, connect.NewRequest(&corpusv1.ScaleRequest{Project: "site", Counts: map[string]uint32{"web": 1, "worker": 1}})); err != nil {
		t.Fatal(err)
	}
	v = s.Store().Read()
	e = corpusv1.EnvNamed(v.Project("site"), "dev")
	if len(e.Instances) != 0 || v.GuestByName("site-dev-2").GetDesiredState() != state.DesiredDeleted || v.GuestByName("site-dev-3").GetDesiredState() != state.DesiredDeleted {
		t.Errorf("after scaling down: %v, %v", e, v.GuestByName("site-dev-2"))
	}
	scaleUpAgain(t, s, nodes)

	audit, err := ops.audit.ListAudit(ctx, connect.NewRequest(&corpusv1.ListAuditRequest{Action: "scale_env"}))
	if err != nil || len(audit.Msg.Entries) < 2 || !strings.Contains(audit.Msg.Entries[len(audit.Msg.Entries)-1].Target+audit.Msg.Entries[0].Target, "web=3 worker=1") {
		t.Errorf("audit of scale_env = %v, %v", audit, err)
	}
}

// scaleUpAgain scales site/dev, just scaled down to one instance, up to
// three again: the new instances 2 and 3 take the names of guests and
// volumes (--shared-nothing) still being deleted on their nodes, so the
// scale waits for those to go, says why when it may wait no longer, and
// makes them once their nodes report them gone.
func scaleUpAgain(t *testing.T, s *server, nodes map[string]*agent) {
	ctx := context.Background()
	ops := s.ops()
	// A policy whose range needs those names is written meanwhile: only
	// its scale up waits.
	if _, err := ops.project.Autoscale(ctx, connect.NewRequest(&corpusv1.AutoscaleRequest{Project: "site", Process: "web", Min: 1, Max: 3, TargetRps: 50})); err != nil {
		t.Fatalf("autoscale up to 3 while the instances removed before are being deleted = %v; want the policy written", err)
	}
	if _, err := ops.project.Autoscale(ctx, connect.NewRequest(&corpusv1.AutoscaleRequest{Project: "site", Process: "web", Off: true})); err != nil {
		t.Fatal(err)
	}
	up := &corpusv1.ScaleRequest{Project: "site", Counts: map[string]uint32{"web": 3, "worker": 1}}
	// A caller with a deadline hears why before it ends: at once when it
	// leaves less than the second the answer is given, else after waiting
	// most of it.
	for _, d := range []time.Duration{testrun.D(500 * time.Millisecond), testrun.D(3 * time.Second)} {
		short, cancel := context.WithTimeout(ctx, d)
		_, err := ops.project.Scale(short, connect.NewRequest(up))
		cancel()
		if codeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "still being deleted on its node") {
			t.Fatalf("scaling up while the instances removed before are being deleted, within %s = %v; want Unavailable saying why", d, err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := ops.project.Scale(ctx, connect.NewRequest(up))
		done <- err
	}()
	v := s.Store().Read()
	old := map[string]string{}
	for _, name := range []string{"site-dev-2", "site-dev-3"} {
		g := v.GuestByName(name)
		if g.GetDesiredState() != state.DesiredDeleted || v.Volume(name) == nil {
			t.Fatalf("instance %s after the scale-down: guest %v, volume %v; want both there, the guest being deleted", name, g, v.Volume(name))
		}
		old[name] = g.Id
		n := nodes[v.Node(g.NodeId).Name]
		// The guest goes first; its volume, released then, after.
		n.report(t, &corpusv1.ReportedGuest{GuestId: g.Id, Observed: &corpusv1.GuestObserved{State: state.ObservedDeleted}})
		vol := s.Store().Read().Volume(name)
		if vol.GetDesiredState() != state.VolumeDeleted || vol.GetGuestId() != "" {
			t.Fatalf("volume %s once its guest is gone: %v; want it being deleted", name, vol)
		}
		_, err := n.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{
			Capacity: capacity(), Drivers: drivers(), AgentAddress: n.address, AgentVersion: "test",
			Volumes: []*corpusv1.ReportedVolume{{VolumeId: vol.Id, Observed: &corpusv1.VolumeObserved{State: state.ObservedDeleted}}},
		}))
		if err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("scaling up once the old instances were gone = %v", err)
		}
	case <-time.After(testrun.D(20 * time.Second)):
		t.Fatal("the scale did not end once the old instances were gone")
	}
	v = s.Store().Read()
	e := corpusv1.EnvNamed(v.Project("site"), "dev")
	for i, name := range []string{"site-dev-2", "site-dev-3"} {
		g := v.GuestByName(name)
		if len(e.Instances) != 2 || e.Instances[i].GuestName != name || g == nil || g.Id == old[name] || v.VolumeOfGuest(g.Id) == nil {
			t.Errorf("instance %s after scaling up again: %v, guest %v; want a new guest with a volume of its own", name, e.Instances, g)
		}
	}
}
