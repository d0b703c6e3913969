package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// Redeploy of the fake agent (see fakeAgent) says it is done and then
// keeps its stream open until the coordinator leaves it, as a slow link
// delays a stream's end behind its last message; a restart of process
// "fail" fails instead.
func (f *fakeAgent) Redeploy(ctx context.Context, req *connect.Request[corpusv1.AgentRedeployRequest], stream *connect.ServerStream[corpusv1.DeployOutput]) error {
	if err := f.checkKey(req.Header()); err != nil {
		return err
	}
	if slices.Contains(req.Msg.Request.GetProcesses(), "fail") {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("process fail did not start; the old one serves"))
	}
	if err := stream.Send(&corpusv1.DeployOutput{Output: []byte("restarted\n")}); err != nil {
		return err
	}
	if err := stream.Send(&corpusv1.DeployOutput{Done: true, Current: req.Msg.Env.GetCurrentRelease()}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// Rollback of the fake agent is done at once, its stream kept open as
// Redeploy's.
func (f *fakeAgent) Rollback(ctx context.Context, req *connect.Request[corpusv1.RollbackRequest], stream *connect.ServerStream[corpusv1.RollbackOutput]) error {
	if err := f.checkKey(req.Header()); err != nil {
		return err
	}
	if err := stream.Send(&corpusv1.RollbackOutput{Done: true, Current: req.Msg.To}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// TestRedeployAuditsItsOutcome: a restart and a rollback the agent said
// were done are audited ok, although the caller left as soon as it read
// so (as the CLI does) and the agent's stream had not ended yet; a
// restart the agent failed is audited failed.
func TestRedeployAuditsItsOutcome(t *testing.T) {
	t.Parallel()
	s, _ := helloWithReleases(t)
	ctx := context.Background()
	ops := s.ops()

	// untilDone reads a stream as the CLI does: up to the message that
	// says done, then it closes it.
	untilDone := func(next func() (done bool, ok bool), close func() error, streamErr func() error) error {
		defer close()
		for {
			done, ok := next()
			if !ok {
				if err := streamErr(); err != nil {
					return err
				}
				return errors.New("the stream ended without saying it was done")
			}
			if done {
				return nil
			}
		}
	}
	restart := func(processes ...string) error {
		stream, err := ops.project.Deploy(ctx, connect.NewRequest(&corpusv1.RedeployRequest{Project: "hello", Env: "dev", Trigger: corpusv1.TriggerRestart, Processes: processes}))
		if err != nil {
			return err
		}
		return untilDone(func() (bool, bool) { ok := stream.Receive(); return ok && stream.Msg().Done, ok }, stream.Close, stream.Err)
	}
	wantAudit := func(action, want string) {
		t.Helper()
		eventuallyT(t, "the "+action+" audited", func() error {
			all := audit(t, s, action)
			if len(all) == 0 {
				return errors.New("no entry yet")
			}
			if e := all[len(all)-1]; e.Actor != "ops" || e.Target != "hello/dev" || e.Result != want {
				return fmt.Errorf("last %s entry = %v, want ops on hello/dev with result %q", action, e, want)
			}
			return nil
		})
	}

	if err := restart("web"); err != nil {
		t.Fatalf("restart = %v", err)
	}
	wantAudit(corpusv1.TriggerRestart, "ok")
	if err := restart("fail"); codeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("restart of a process that fails = %v, want FailedPrecondition", err)
	}
	wantAudit(corpusv1.TriggerRestart, "failed: agent of node n1: process fail did not start; the old one serves")

	stream, err := ops.project.Rollback(ctx, connect.NewRequest(&corpusv1.RollbackRequest{Project: "hello", Env: "dev", To: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if err := untilDone(func() (bool, bool) { ok := stream.Receive(); return ok && stream.Msg().Done, ok }, stream.Close, stream.Err); err != nil {
		t.Fatalf("rollback = %v", err)
	}
	wantAudit("rollback", "ok: r1 is current")
}

// TestRollbackRollsInstancesBeforeDone: a rollback of an environment of
// two instances says it is done only once the second serves the release
// too, so a caller that leaves at "done" (the CLI) does not leave the
// second on the newer release.
func TestRollbackRollsInstancesBeforeDone(t *testing.T) {
	t.Parallel()
	s, a := helloWithReleases(t)
	ctx := context.Background()
	ops := s.ops()
	first := s.Store().Read().GuestByName("hello-dev").Id
	if _, err := ops.project.Scale(ctx, connect.NewRequest(&corpusv1.ScaleRequest{Project: "hello", Counts: map[string]uint32{"web": 2}, SharedNothing: true})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("hello-dev-2 placed", func(v *state.Snap) bool { return v.GuestByName("hello-dev-2").GetNodeId() == a.id })
	second := s.Store().Read().GuestByName("hello-dev-2").Id

	// The second instance's agent: it serves what the state says, a
	// moment after.
	serving := func(rel uint32) *corpusv1.ReportedGuest {
		g := observed(second, state.ObservedRunning)
		g.Observed.Release = rel
		return g
	}
	stop := make(chan struct{})
	follower := make(chan struct{})
	go func() {
		defer close(follower)
		var said uint32
		for {
			v := s.Store().Read()
			if in := v.Project("hello").GetEnvs()[0].GetInstances(); len(in) == 1 && in[0].Release != said {
				said = in[0].Release
				time.Sleep(50 * time.Millisecond)
				// Not a.report: it fails the test, which only the
				// test's goroutine may; the rollback's wait tells.
				a.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: capacity(), Drivers: drivers(), AgentAddress: a.address,
					AgentVersion: "test", Guests: []*corpusv1.ReportedGuest{observed(first, state.ObservedRunning), serving(said)}}))
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-follower }()

	stream, err := ops.project.Rollback(ctx, connect.NewRequest(&corpusv1.RollbackRequest{Project: "hello", Env: "dev", To: 1}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
		if !stream.Msg().Done {
			continue
		}
		// What a caller that leaves now finds.
		g := s.Store().Read().Guest(second)
		if got := g.GetObserved().GetRelease(); got != 1 {
			t.Errorf("the rollback said done while instance 2 served r%d, want r1", got)
		}
		break
	}
	stream.Close()
	if err := stream.Err(); err != nil {
		t.Fatalf("rollback = %v", err)
	}
	// (The first instance's release is its agent's to record; the fake
	// agent does not.)
	if in := s.Store().Read().Project("hello").GetEnvs()[0].GetInstances(); len(in) != 1 || in[0].Release != 1 {
		t.Errorf("instances after the rollback = %v, want instance 2 at r1", in)
	}
}

// helloWithReleases is a coordinator with node n1 served by a fakeAgent,
// and project hello (env dev) running there with releases r1 and r2,
// both succeeded.
func helloWithReleases(t *testing.T) (*server, *agent) {
	t.Helper()
	s := start(t, t.TempDir())
	ctx := context.Background()
	a := s.enroll("n1")
	a.address = serveFakeAgent(t, s, a)
	a.report(t)
	if _, err := s.ops().project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "hello", Env: "dev"})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("hello-dev placed", func(v *state.Snap) bool { return v.GuestByName("hello-dev").GetNodeId() == a.id })
	a.report(t, observed(s.Store().Read().GuestByName("hello-dev").Id, state.ObservedRunning))
	for i := range 2 {
		r, err := a.agent.BeginRelease(ctx, connect.NewRequest(&corpusv1.BeginReleaseRequest{Project: "hello", Env: "dev", Commit: fmt.Sprintf("c0ffee%d", i), Author: "ops"}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.agent.FinishRelease(ctx, connect.NewRequest(&corpusv1.FinishReleaseRequest{Id: r.Msg.Release.Id, Status: corpusv1.ReleaseSucceeded})); err != nil {
			t.Fatal(err)
		}
	}
	return s, a
}
