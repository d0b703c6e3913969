package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/scheduler"
	"corpus/coordinator/state"
	"corpus/coordinator/state/statetest"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// replica is a store and the real state machine (statetest.Replica),
// each command applied as the next log entry, as Raft would on a
// one-member group. It records what the scheduler proposes.
type replica struct {
	*statetest.Replica
	t testing.TB

	reg     *prometheus.Registry
	metrics *scheduler.Metrics

	mu       sync.Mutex
	proposed []*corpusv1.PlaceGuest
	batches  int
}

func newReplica(t testing.TB) *replica {
	return newReplicaOf(t, &corpusv1.ClusterConfig{ClusterId: "c1"})
}

// newReplicaOf is a replica of a cluster bootstrapped with cfg.
func newReplicaOf(t testing.TB, cfg *corpusv1.ClusterConfig) *replica {
	r := &replica{Replica: statetest.NewReplica(time.Now), t: t, reg: prometheus.NewRegistry()}
	r.metrics = scheduler.NewMetrics(r.reg, r.Store)
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_BootstrapCluster{BootstrapCluster: &corpusv1.BootstrapCluster{Config: cfg}}})
	return r
}

func (r *replica) apply(cmd *corpusv1.Command) (uint64, error) {
	return r.Propose(context.Background(), cmd)
}

// propose is the scheduler's scheduler.Proposer.
func (r *replica) propose(_ context.Context, cmd *corpusv1.Command) (uint64, error) {
	if b := cmd.GetPlaceGuests(); b != nil {
		r.mu.Lock()
		r.proposed = append(r.proposed, b.Placements...)
		r.batches++
		r.mu.Unlock()
	}
	return r.apply(cmd)
}

func (r *replica) must(cmds ...*corpusv1.Command) {
	r.t.Helper()
	for _, c := range cmds {
		if _, err := r.apply(c); err != nil {
			r.t.Fatalf("Apply(%v) = %v, want success", c, err)
		}
	}
}

// proposals returns what the scheduler proposed for guest id.
func (r *replica) proposals(id string) []*corpusv1.PlaceGuest {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*corpusv1.PlaceGuest
	for _, p := range r.proposed {
		if p.GuestId == id {
			out = append(out, p)
		}
	}
	return out
}

// run starts the scheduler loop and returns a function that stops it and
// waits for it to return.
func (r *replica) run() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		scheduler.Loop(ctx, r.Store, r.propose, slog.New(slog.DiscardHandler), r.metrics)
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	r.t.Cleanup(stop)
	return stop
}

// waitFor blocks until cond holds for the state, or fails the test after
// a deadline. cond reads through the view, so its reads are watched.
func (r *replica) waitFor(what string, cond func(v *state.Snap) bool) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(10*time.Second))
	defer cancel()
	for {
		v := r.Store.Read()
		if cond(v) {
			return
		}
		if err := v.Wait(ctx); err != nil {
			r.t.Fatalf("waiting for %s: %v", what, err)
		}
	}
}

func (r *replica) enroll(name string, memGiB int64, ready bool, opts ...func(*corpusv1.Node)) {
	r.t.Helper()
	r.must(enrollCmds(name, opts...)...)
	if ready {
		r.report(name, memGiB, "v1")
	}
}

// enrollCmds enroll node name, initializing in mode dev, changed by opts.
func enrollCmds(name string, opts ...func(*corpusv1.Node)) []*corpusv1.Command {
	n := &corpusv1.Node{Id: name + "-id", Name: name, Status: state.NodeInitializing, Mode: "dev"}
	for _, o := range opts {
		o(n)
	}
	return []*corpusv1.Command{
		{Cmd: &corpusv1.Command_CreateJoinToken{CreateJoinToken: &corpusv1.CreateJoinToken{Token: &corpusv1.JoinToken{
			Id: "tok-" + name, SecretHash: "h", ExpiresAt: timestamppb.New(time.Now().Add(time.Hour)),
		}}}},
		{Cmd: &corpusv1.Command_EnrollNode{EnrollNode: &corpusv1.EnrollNode{TokenId: "tok-" + name, TokenSecretHash: "h", Node: n}}},
	}
}

// report is what the API does on an agent's report.
func (r *replica) report(name string, memGiB int64, version string) {
	r.t.Helper()
	r.must(reportCmd(name, memGiB, version))
}

// reportCmd is node name's report of memGiB of memory, 4 cores, 100 GiB
// of disk and a healthy lxc driver, making it ready.
func reportCmd(name string, memGiB int64, version string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_UpdateNode{UpdateNode: &corpusv1.UpdateNode{
		NodeId:       name + "-id",
		Capacity:     &corpusv1.Resources{MemoryBytes: memGiB * gib, CpuMillis: 4000, DiskBytes: 100 * gib},
		Drivers:      []*corpusv1.DriverInfo{{Name: "lxc", Healthy: true}},
		AgentVersion: version,
	}}}
}

func (r *replica) createGuest(name string, memGiB int64) {
	r.t.Helper()
	r.addGuest(name, func(g *corpusv1.Guest) { g.Spec.Resources.MemoryBytes = memGiB * gib })
}

// addGuest creates guest name, running, as guest() made it and change
// changed it.
func (r *replica) addGuest(name string, change func(*corpusv1.Guest)) {
	r.t.Helper()
	g := guest()
	g.Id, g.Name, g.DesiredState = name+"-id", name, state.DesiredRunning
	change(g)
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_CreateGuest{CreateGuest: &corpusv1.CreateGuest{Guest: g}}})
}

func placedOn(id, nodeID string) func(v *state.Snap) bool {
	return func(v *state.Snap) bool { return v.Guest(id).GetNodeId() == nodeID }
}

func pendingWith(id, reason string) func(v *state.Snap) bool {
	return func(v *state.Snap) bool { return strings.Contains(v.Guest(id).GetPendingReason(), reason) }
}

func TestLoopPlacesOnceANodeIsReady(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.createGuest("web", 1)
	stop := r.run()

	r.waitFor("web pending without nodes", pendingWith("web-id", "no nodes are enrolled"))
	r.enroll("n1", 8, false)
	r.waitFor("web pending on an initializing node", pendingWith("web-id", "1 node not ready (initializing)"))
	r.report("n1", 8, "v1")
	r.waitFor("web placed on n1", placedOn("web-id", "n1-id"))
	stop()

	g := r.Store.Read().Guest("web-id")
	if g.PendingReason != "" {
		t.Errorf("Guest(web).PendingReason = %q, want it cleared by the placement", g.PendingReason)
	}
	if got := r.proposals("web-id"); len(got) != 3 {
		t.Errorf("proposals for web = %v, want 3 (two reasons, one placement)", got)
	}
}

// TestLoopMetrics: the pending gauge follows the state, and every pass
// that changed placements is timed and counted.
func TestLoopMetrics(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.enroll("n1", 8, true)
	r.createGuest("web", 1)
	if err := testutil.GatherAndCompare(r.reg, pending(1), "corpus_scheduler_pending_guests"); err != nil {
		t.Errorf("web unplaced: %v", err)
	}
	r.run()
	r.waitFor("web placed on n1", placedOn("web-id", "n1-id"))
	if err := testutil.GatherAndCompare(r.reg, pending(0), "corpus_scheduler_pending_guests"); err != nil {
		t.Errorf("web placed: %v", err)
	}
	// The placement is committed just before the pass records it.
	want := `
# HELP corpus_scheduler_placements_total Placement decisions committed, by result: placed on a node, or left pending for want of one.
# TYPE corpus_scheduler_placements_total counter
corpus_scheduler_placements_total{result="pending"} 0
corpus_scheduler_placements_total{result="placed"} 1
`
	var err error
	for deadline := time.Now().Add(testrun.D(5 * time.Second)); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err = testutil.GatherAndCompare(r.reg, strings.NewReader(want), "corpus_scheduler_placements_total"); err == nil {
			break
		}
	}
	if err != nil {
		t.Error(err)
	}
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == "corpus_scheduler_placement_duration_seconds" {
			n = mf.Metric[0].GetHistogram().GetSampleCount()
		}
	}
	if n != 1 {
		t.Errorf("placement_duration_seconds count = %d, want 1 pass", n)
	}
}

// pending is the exposition of the pending guests gauge at n.
func pending(n int) *strings.Reader {
	return strings.NewReader(fmt.Sprintf(`
# HELP corpus_scheduler_pending_guests Guests not placed on any node (and not being deleted).
# TYPE corpus_scheduler_pending_guests gauge
corpus_scheduler_pending_guests %d
`, n))
}

func TestLoopRecordsAReasonOnce(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.enroll("n1", 2, true)
	r.createGuest("big", 4)
	stop := r.run()
	r.waitFor("big pending", pendingWith("big-id", "1 node short of memory"))

	// Changes that wake the loop without changing why big does not fit.
	r.report("n1", 2, "v2")
	r.report("n1", 3, "v2")
	// A barrier: one pass considers every guest in name order, so once
	// small (after big) is placed, big was looked at after the reports.
	r.createGuest("small", 1)
	r.waitFor("small placed", placedOn("small-id", "n1-id"))
	stop()

	if got := r.proposals("big-id"); len(got) != 1 {
		t.Errorf("proposals for big = %v, want 1: the same reason is not proposed again", got)
	}
	if got := r.proposals("small-id"); len(got) != 1 {
		t.Errorf("proposals for small = %v, want 1", got)
	}
}

func TestLoopCountsWhatItPlacesInOnePass(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.enroll("a", 3, true)
	r.enroll("b", 4, true)
	// Both pending before the loop starts: one pass places both, in one
	// Raft entry. Bin-packing puts g1 on a (the fuller fit); without
	// counting that placement, g2 would go there too and overfill it.
	r.createGuest("g1", 2)
	r.createGuest("g2", 2)
	stop := r.run()
	r.waitFor("g1 on a", placedOn("g1-id", "a-id"))
	r.waitFor("g2 on b", placedOn("g2-id", "b-id"))
	stop()
	if r.batches != 1 {
		t.Errorf("PlaceGuests entries = %d, want 1 for one pass", r.batches)
	}
}

func TestLoopPlacesUntilFull(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.enroll("a", 2, true)
	r.run()
	r.createGuest("g1", 1)
	r.waitFor("g1 on a", placedOn("g1-id", "a-id"))
	r.createGuest("g2", 1)
	r.waitFor("g2 on a", placedOn("g2-id", "a-id"))
	r.createGuest("g3", 1)
	r.waitFor("g3 pending", pendingWith("g3-id", "1 node short of memory"))

	// A deleted guest's room is free once its agent confirms it is gone.
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_SetGuestDesired{SetGuestDesired: &corpusv1.SetGuestDesired{Name: "g1", DesiredState: state.DesiredDeleted}}})
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_ReportGuests{ReportGuests: &corpusv1.ReportGuests{
		NodeId: "a-id", Guests: []*corpusv1.ObservedGuest{{GuestId: "g1-id", Observed: &corpusv1.GuestObserved{State: state.ObservedDeleted}}},
	}}})
	r.waitFor("g3 on a", placedOn("g3-id", "a-id"))
}
