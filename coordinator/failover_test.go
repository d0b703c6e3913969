package coordinator_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator"
	"corpus/coordinator/state"
	"corpus/internal/gossip"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// heartbeat reports for the agent every 200ms until the test ends or stop
// is called.
func (a *agent) heartbeat(t *testing.T, observed ...*corpusv1.ReportedGuest) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			a.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{
				Capacity: capacity(), Drivers: drivers(), AgentAddress: a.address, AgentVersion: "test", Guests: observed,
			}))
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func (s *server) nodeStatus(id string) func(v *state.Snap) bool {
	return func(v *state.Snap) bool { return v.Node(id).GetStatus() == state.NodeDown }
}

func (s *server) createGuest(t *testing.T, name string, volume int64) *corpusv1.Guest {
	t.Helper()
	req := &corpusv1.CreateGuestRequest{Name: name, Spec: &corpusv1.GuestSpec{Image: "busybox", Resources: &corpusv1.Resources{MemoryBytes: 64 << 20}}}
	if volume > 0 {
		req.Spec.Volume = &corpusv1.VolumeSpec{SizeBytes: volume}
	}
	res, err := s.ops().guests.CreateGuest(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("CreateGuest(%s) = %v", name, err)
	}
	return res.Msg.Guest
}

// TestGossipMarksNodeDown: a node whose gossip member dies is marked down
// within seconds, long before its heartbeat deadline; reporting again
// brings it back. The death of a restarted agent's predecessor, found
// after the new process joined, is not the node's.
func TestGossipMarksNodeDown(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir(), func(c *coordinator.Config) { c.NodeTimeout = time.Minute })
	a := s.enroll("n1")
	a.report(t)
	s.waitFor("n1 ready", func(v *state.Snap) bool { return v.Node(a.id).GetStatus() == state.NodeReady })
	w := a.watch(t)
	msg := w.next("a gossip address", func(m *corpusv1.WatchResponse) bool { return m.GossipAddr != "" })
	member := func() *gossip.Member {
		t.Helper()
		m, err := gossip.Start(gossip.Config{
			Name: gossip.NodeMember(a.id, gossip.NewRun()), BindAddr: "127.0.0.1:0",
			ClusterID: s.Store().Read().Config().GetClusterId(), Secret: a.agentKey, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatalf("gossip.Start() = %v", err)
		}
		t.Cleanup(func() { m.Close() })
		if err := m.Join(msg.GossipAddr); err != nil {
			t.Fatalf("Join(%s) = %v", msg.GossipAddr, err)
		}
		return m
	}
	old := member()
	time.Sleep(2 * time.Second) // a few probe rounds: alive, and not marked down for it
	if got := s.Store().Read().Node(a.id).GetStatus(); got != state.NodeReady {
		t.Fatalf("n1 = %s while its gossip member answers, want ready", got)
	}

	// The agent restarts: the new process joins, then the pool finds the
	// old one dead.
	m := member()
	old.Close()
	for deadline := time.Now().Add(testrun.D(20 * time.Second)); slices.Contains(m.Alive(), old.Name()); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the old member still alive in the pool after 20s: %v", m.Alive())
		}
	}
	time.Sleep(time.Second) // the news reaches the coordinator's member, if it has not yet
	if got := s.Store().Read().Node(a.id).GetStatus(); got != state.NodeReady {
		t.Fatalf("n1 = %s after its restarted agent's predecessor died, want ready", got)
	}
	killed := time.Now()
	m.Close()
	s.waitFor("n1 down", s.nodeStatus(a.id))
	took := time.Since(killed)
	t.Logf("node marked down %s after its gossip member died", took)
	if took > testrun.D(12*time.Second) {
		t.Errorf("n1 marked down %s after its member died, want within seconds", took)
	}
	a.report(t)
	s.waitFor("n1 ready again", func(v *state.Snap) bool { return v.Node(a.id).GetStatus() == state.NodeReady })
}

// TestDownNodeReschedules: when a node misses its heartbeat deadline, its
// stateless guest runs on another node under a new address; its guest
// with a volume stays and is shown lost until the node returns.
func TestDownNodeReschedules(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir(), func(c *coordinator.Config) { c.NodeTimeout = 2 * time.Second })
	n1 := s.enroll("n1")
	stop1 := n1.heartbeat(t)
	s.waitFor("n1 ready", func(v *state.Snap) bool { return v.Node(n1.id).GetStatus() == state.NodeReady })
	web := s.createGuest(t, "web", 0)
	s.createGuest(t, "db", 64<<20)
	for _, g := range []string{"web", "db"} {
		waitGuest(t, s, g, g+" on n1", func(r *corpusv1.GetGuestResponse) bool { return r.NodeName == "n1" })
	}
	n2 := s.enroll("n2")
	n2.heartbeat(t)
	s.waitFor("n2 ready", func(v *state.Snap) bool { return v.Node(n2.id).GetStatus() == state.NodeReady })
	before := waitGuest(t, s, "web", "web", func(*corpusv1.GetGuestResponse) bool { return true })

	stop1()
	moved := waitGuest(t, s, "web", "web on n2", func(r *corpusv1.GetGuestResponse) bool { return r.NodeName == "n2" })
	if moved.Guest.Address == before.Guest.Address || !strings.HasPrefix(moved.Guest.Address, "10.210.1.") {
		t.Errorf("web moved with address %s (was %s), want one of n2's subnet 10.210.1.0/24", moved.Guest.Address, before.Guest.Address)
	}
	if moved.Guest.Id != web.Id {
		t.Errorf("web's id changed to %s, want %s", moved.Guest.Id, web.Id)
	}
	db := waitGuest(t, s, "db", "db lost", func(r *corpusv1.GetGuestResponse) bool { return r.Status == corpusv1.GuestLost })
	if db.NodeName != "n1" {
		t.Errorf("db is on %s, want it kept on n1 with its data", db.NodeName)
	}
	n1.heartbeat(t)
	waitGuest(t, s, "db", "db back", func(r *corpusv1.GetGuestResponse) bool { return r.Status != corpusv1.GuestLost })
	if w := n1.watch(t).next("n1's guests", func(*corpusv1.WatchResponse) bool { return true }); len(w.Guests) != 1 || w.Guests[0].Name != "db" {
		t.Errorf("n1's desired guests after it returned = %v, want only db (web runs on n2)", w.Guests)
	}
}

// TestDrain: draining a node moves its stateless guest to another node,
// the old copy staying in the old node's desired state (at its old
// address) until the new one runs; a guest with a volume is reported as
// needing a volume move; the node takes nothing new.
func TestDrain(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	ctx := context.Background()
	ops := s.ops()
	n1 := s.enroll("n1")
	n1.report(t)
	web := s.createGuest(t, "web", 0)
	s.createGuest(t, "db", 64<<20)
	placed := waitGuest(t, s, "web", "web on n1", func(r *corpusv1.GetGuestResponse) bool { return r.NodeName == "n1" })
	waitGuest(t, s, "db", "db on n1", func(r *corpusv1.GetGuestResponse) bool { return r.NodeName == "n1" })
	n1.report(t, observed(web.Id, state.ObservedRunning))
	n2 := s.enroll("n2")
	n2.report(t)

	if _, err := ops.nodes.SetNodeMode(ctx, connect.NewRequest(&corpusv1.SetNodeModeRequest{Name: "n1", Mode: "sideways"})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("SetNodeMode(sideways) = %v, want %v", err, connect.CodeInvalidArgument)
	}
	res, err := ops.nodes.SetNodeMode(ctx, connect.NewRequest(&corpusv1.SetNodeModeRequest{Name: "n1", Mode: "drain"}))
	if err != nil || !res.Msg.Changed || res.Msg.Node.Node.Mode != "drain" {
		t.Fatalf("SetNodeMode(n1, drain) = %v, %v; want changed, mode drain", res, err)
	}
	moving := waitGuest(t, s, "web", "web moving to n2", func(r *corpusv1.GetGuestResponse) bool { return r.NodeName == "n2" })
	if moving.Guest.PreviousNodeId != n1.id {
		t.Errorf("web moving = %v, want its old copy on n1 kept", moving.Guest)
	}
	old := n1.watch(t).next("web's old copy", func(m *corpusv1.WatchResponse) bool { return len(m.Guests) == 2 })
	for _, g := range old.Guests {
		if g.Name == "web" && (g.Address != placed.Guest.Address || g.NodeId != n1.id) {
			t.Errorf("n1's desired web = %v, want it as it was (address %s, node n1)", g, placed.Guest.Address)
		}
	}
	st, err := ops.nodes.DrainStatus(ctx, connect.NewRequest(&corpusv1.DrainStatusRequest{Name: "n1"}))
	if err != nil {
		t.Fatalf("DrainStatus(n1) = %v", err)
	}
	states := map[string]string{}
	for _, g := range st.Msg.Guests {
		states[g.Name] = g.State + ":" + g.ToNode + g.Volume
	}
	if st.Msg.Done || states["web"] != "moving:n2" || states["db"] != "needs-volume-move:db" {
		t.Errorf("DrainStatus(n1) = %v, want not done, web moving to n2, db needing a volume move", st.Msg)
	}

	// The new copy runs: the migration ends and n1 lets go of web.
	n2.report(t, observed(web.Id, state.ObservedRunning))
	ctx2, cancel := context.WithTimeout(ctx, testrun.D(waitTimeout))
	defer cancel()
	index := st.Msg.Index
	for {
		st, err = ops.nodes.DrainStatus(ctx2, connect.NewRequest(&corpusv1.DrainStatusRequest{Name: "n1", MinIndex: index, WaitSeconds: 5}))
		if err != nil {
			t.Fatalf("DrainStatus(n1, after %d) = %v", index, err)
		}
		if st.Msg.Done {
			break
		}
		index = st.Msg.Index
	}
	if st.Msg.Empty || len(st.Msg.Guests) != 1 || st.Msg.Guests[0].Name != "db" {
		t.Errorf("DrainStatus(n1) when done = %v, want only db left", st.Msg)
	}
	n1.watch(t).next("n1 without web", func(m *corpusv1.WatchResponse) bool { return len(m.Guests) == 1 && m.Guests[0].Name == "db" })

	// A draining node takes nothing new; dev mode ends the drain.
	s.createGuest(t, "late", 0)
	waitGuest(t, s, "late", "late on n2", func(r *corpusv1.GetGuestResponse) bool { return r.NodeName == "n2" })
	res, err = ops.nodes.SetNodeMode(ctx, connect.NewRequest(&corpusv1.SetNodeModeRequest{Name: "n1", Mode: "ineligible"}))
	if err != nil || !res.Msg.Node.Node.Ineligible || res.Msg.Node.Node.Mode != "drain" {
		t.Errorf("SetNodeMode(n1, ineligible) = %v, %v; want ineligible, still draining", res, err)
	}
	res, err = ops.nodes.SetNodeMode(ctx, connect.NewRequest(&corpusv1.SetNodeModeRequest{Name: "n1", Mode: "dev"}))
	if err != nil || res.Msg.Node.Node.Mode != "dev" {
		t.Errorf("SetNodeMode(n1, dev) = %v, %v; want mode dev", res, err)
	}
	again, err := ops.nodes.SetNodeMode(ctx, connect.NewRequest(&corpusv1.SetNodeModeRequest{Name: "n1", Mode: "dev"}))
	if err != nil || again.Msg.Changed {
		t.Errorf("SetNodeMode(n1, dev) again = %v, %v; want unchanged", again, err)
	}
}
