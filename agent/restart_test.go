package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/agent"
	"corpus/drivers/fakedriver"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestRestartedAgentAnswersAtItsFirstReport: an agent started again
// answers the coordinator from its first report on. The new agent
// listens at another address, so the moment its first report is applied
// is the moment the node's agent address changes in the coordinator's
// state; right then, calls relayed through the coordinator reach it: a
// log read succeeds and an exec gets the agent's own answer (the fake
// driver cannot exec), not "connection refused" (Unavailable).
func TestRestartedAgentAnswersAtItsFirstReport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, guests, joinToken := startCoordinator(t)
	fake := fakedriver.New("fake", "busybox")
	stateDir := t.TempDir()
	stop := runAgent(t, srv.APIAddr(), joinToken, stateDir, fake)
	if _, err := guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "web", Spec: &corpusv1.GuestSpec{
		Driver: "fake", Image: "busybox", Resources: &corpusv1.Resources{MemoryBytes: 64 << 20, CpuMillis: 100, DiskBytes: 1 << 30}}})); err != nil {
		t.Fatalf("CreateGuest(web) = %v", err)
	}
	testrun.Wait(t, 15*time.Second, "guest web running", func() error {
		res, err := guests.GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: "web"}))
		if err != nil {
			return err
		}
		if st := res.Msg.Guest.GetObserved().GetState(); st != corpusv1.ObservedRunning {
			return fmt.Errorf("guest web is %q", st)
		}
		return nil
	})
	stop()
	old := srv.Store().Read().NodeByName("node-1").GetAgentAddress()

	runAgent(t, srv.APIAddr(), joinToken, stateDir, fake, func(c *agent.Config) { c.APIAddr = "127.0.0.2:0" })
	wctx, cancel := context.WithTimeout(ctx, testrun.D(15*time.Second))
	defer cancel()
	var n *corpusv1.Node
	for {
		view := srv.Store().Read()
		if n = view.NodeByName("node-1"); n.GetAgentAddress() != old {
			break
		}
		if err := view.Wait(wctx); err != nil {
			t.Fatalf("the restarted agent's first report (node-1's agent address still %s): %v", old, err)
		}
	}

	logs, err := guests.GuestLogs(ctx, connect.NewRequest(&corpusv1.GuestLogsRequest{Name: "web"}))
	if err == nil {
		for logs.Receive() {
		}
		err = logs.Err()
		logs.Close()
	}
	if err != nil {
		t.Errorf("logs of web at the restarted agent's first report (agent at %s) = %v, want them", n.AgentAddress, err)
	}
	exec, err := guests.ExecGuest(ctx, connect.NewRequest(&corpusv1.ExecGuestRequest{Name: "web", Argv: []string{"true"}}))
	if err == nil {
		for exec.Receive() {
		}
		err = exec.Err()
		exec.Close()
	}
	if connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Errorf("exec in web at the restarted agent's first report (agent at %s) = %v, want the agent's answer that the fake driver cannot exec", n.AgentAddress, err)
	}
}
