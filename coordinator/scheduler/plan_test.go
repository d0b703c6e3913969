package scheduler_test

import (
	"fmt"
	"net/netip"
	"testing"

	"corpus/coordinator/scheduler"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

func (r *replica) nodeStatus(name, status string) {
	r.t.Helper()
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_SetNodeStatus{SetNodeStatus: &corpusv1.SetNodeStatus{NodeId: name + "-id", Status: status}}})
}

func (r *replica) nodeMode(name, mode string) {
	r.t.Helper()
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_SetNodeMode{SetNodeMode: &corpusv1.SetNodeMode{NodeId: name + "-id", Mode: mode}}})
}

func (r *replica) observe(node, guest, st string) {
	r.t.Helper()
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_ReportGuests{ReportGuests: &corpusv1.ReportGuests{
		NodeId: node + "-id", Guests: []*corpusv1.ObservedGuest{{GuestId: guest + "-id", Observed: &corpusv1.GuestObserved{State: st}}},
	}}})
}

// createVolumeGuest creates a guest with a volume of its own.
func (r *replica) createVolumeGuest(name string, memGiB int64) {
	r.t.Helper()
	r.addGuest(name, func(g *corpusv1.Guest) {
		g.Spec.Resources.MemoryBytes = memGiB * gib
		g.Spec.Volume = &corpusv1.VolumeSpec{SizeBytes: gib, Path: "/srv/data"}
	})
}

// TestLoopReschedulesStatelessGuestsOfADownNode: when a node goes down,
// its stateless guests move to another node at once, each with an
// address of its new node's subnet; a guest with a volume stays where its
// data is.
func TestLoopReschedulesStatelessGuestsOfADownNode(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.enroll("a", 8, true)
	r.createGuest("web", 1)
	r.createGuest("api", 1)
	r.createVolumeGuest("db", 1)
	r.run()
	for _, g := range []string{"web", "api", "db"} {
		r.waitFor(g+" on a", placedOn(g+"-id", "a-id"))
	}
	before := r.Store.Read().Guest("web-id").Address
	r.enroll("b", 8, true)
	r.nodeStatus("a", state.NodeDown)
	r.waitFor("web on b", placedOn("web-id", "b-id"))
	r.waitFor("api on b", placedOn("api-id", "b-id"))

	v := r.Store.Read()
	subnetB := v.Node("b-id").GuestSubnet
	web := v.Guest("web-id")
	if web.Address == before || !inSubnet(web.Address, subnetB) {
		t.Errorf("web moved with address %s (was %s), want a new one in b's subnet %s", web.Address, before, subnetB)
	}
	if last := web.Events[len(web.Events)-1]; last.Type != "rescheduled" {
		t.Errorf("web's last event = %v, want rescheduled", last)
	}
	if got := v.Guest("db-id").NodeId; got != "a-id" {
		t.Errorf("db (with a volume) moved to %s, want it kept on a", got)
	}
	if web.PreviousNodeId != "" {
		t.Errorf("web.PreviousNodeId = %q, want none: a down node's copy is not waited for", web.PreviousNodeId)
	}
}

// TestLoopKeepsAReasonForGuestsOfADownNode: a stateless guest of a down
// node that no other node takes stays, with the reason, until one does.
func TestLoopKeepsAReasonForGuestsOfADownNode(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.enroll("a", 8, true)
	r.enroll("b", 1, true)
	r.createGuest("web", 2)
	r.run()
	r.waitFor("web on a", placedOn("web-id", "a-id"))
	r.nodeStatus("a", state.NodeDown)
	r.waitFor("web has a reason", pendingWith("web-id", "1 node short of memory"))
	if got := r.Store.Read().Guest("web-id").NodeId; got != "a-id" {
		t.Fatalf("web is on %q, want it left on a while nothing else fits", got)
	}
	r.report("b", 4, "v2")
	r.waitFor("web on b", placedOn("web-id", "b-id"))
	if got := r.Store.Read().Guest("web-id").PendingReason; got != "" {
		t.Errorf("web.PendingReason = %q after its move, want it cleared", got)
	}
}

// TestLoopDrainsStartNewBeforeStoppingOld: draining a node places a new
// copy of each stateless guest elsewhere while the old copy stays in the
// old node's care; the new copy running ends the migration.
func TestLoopDrainsStartNewBeforeStoppingOld(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.enroll("a", 8, true)
	r.createGuest("web", 1)
	r.createVolumeGuest("db", 1)
	r.run()
	r.waitFor("web on a", placedOn("web-id", "a-id"))
	r.waitFor("db on a", placedOn("db-id", "a-id"))
	oldAddr := r.Store.Read().Guest("web-id").Address
	r.enroll("b", 8, true)
	r.nodeMode("a", state.ModeDrain)
	r.waitFor("web migrating to b", placedOn("web-id", "b-id"))

	v := r.Store.Read()
	web := v.Guest("web-id")
	if web.PreviousNodeId != "a-id" || web.PreviousAddress != oldAddr {
		t.Fatalf("web migrating = previous %q at %q, want the old copy on a at %s", web.PreviousNodeId, web.PreviousAddress, oldAddr)
	}
	if got := v.GuestsLeaving("a-id"); len(got) != 1 || got[0].Id != "web-id" {
		t.Errorf("GuestsLeaving(a) = %v, want web", got)
	}
	if got := v.Guest("db-id").NodeId; got != "a-id" {
		t.Errorf("db (with a volume) is on %s during the drain, want a: it needs a volume move", got)
	}
	r.observe("b", "web", state.ObservedCreating)
	if r.Store.Read().Guest("web-id").PreviousNodeId == "" {
		t.Fatalf("migration ended while the new copy was only creating")
	}
	r.observe("b", "web", state.ObservedRunning)
	r.waitFor("migration ended", func(v *state.Snap) bool { return v.Guest("web-id").GetPreviousNodeId() == "" })
	if got := r.Store.Read().GuestsLeaving("a-id"); len(got) != 0 {
		t.Errorf("GuestsLeaving(a) = %v after the new copy runs, want none", got)
	}
}

// TestPlanSpreadsAProjectAcrossZones: a project's new environment goes to
// the zone without the project's other guests, though bin-packing would
// pick a fuller node of the other zone.
func TestPlanSpreadsAProjectAcrossZones(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	zone := func(z string) func(*corpusv1.Node) {
		return func(n *corpusv1.Node) { n.Labels = map[string]string{"zone": z} }
	}
	r.enroll("dev-a", 8, true, zone("a"))
	r.enroll("stg-a", 8, true, zone("a"))
	r.enroll("stg-b", 16, true, zone("b"))
	r.nodeMode("stg-a", state.ModeStaging)
	r.nodeMode("stg-b", state.ModeStaging)
	r.createProjectEnv("hello", "dev")
	r.run()
	r.waitFor("hello-dev on dev-a", placedOn("hello-dev-id", "dev-a-id"))
	r.createProjectEnv("hello", "staging")
	r.waitFor("hello-staging in zone b", placedOn("hello-staging-id", "stg-b-id"))

	// Outside the project, bin-packing picks the fuller node of zone a.
	other := guest()
	other.Id = "other-id"
	if d := scheduler.Explain(r.Store.Read(), other); d.NodeID != "dev-a-id" {
		t.Errorf("Explain(a guest of no project) = %+v, want dev-a (bin-packing)", d)
	}
}

// createSmallGuest creates a guest of 256 MiB, a tenth of a core and
// 1 GiB of disk.
func (r *replica) createSmallGuest(name string) {
	r.t.Helper()
	r.addGuest(name, func(g *corpusv1.Guest) {
		g.Spec.Resources = &corpusv1.Resources{MemoryBytes: gib / 4, CpuMillis: 100, DiskBytes: gib}
	})
}

func (r *replica) createProjectEnv(project, env string) {
	r.t.Helper()
	g := guest()
	g.Id, g.Name, g.DesiredState = project+"-"+env+"-id", project+"-"+env, state.DesiredRunning
	g.Spec.Volume = &corpusv1.VolumeSpec{SizeBytes: gib, Path: "/srv/data"}
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_CreateProject{CreateProject: &corpusv1.CreateProject{
		ProjectId: project + "-pid", Name: project, Env: &corpusv1.ProjectEnv{Name: env, HttpPort: 80, Branch: "main"}, Guest: g,
	}}})
}

// TestPlanIsOneEntryForManyGuests: a pass over many pending guests is one
// PlaceGuests entry, and every placement in it holds.
func TestPlanIsOneEntryForManyGuests(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	for _, n := range []string{"a", "b", "c"} {
		r.enroll(n, 64, true)
	}
	names := make([]string, 100)
	for i := range names {
		names[i] = "g" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		r.createSmallGuest(names[i])
	}
	plan := scheduler.Plan(r.Store.Read())
	if len(plan) != len(names) {
		t.Fatalf("Plan() = %d placements, want %d", len(plan), len(names))
	}
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_PlaceGuests{PlaceGuests: &corpusv1.PlaceGuests{Placements: plan}}})
	v := r.Store.Read()
	for _, p := range plan {
		if got := v.Guest(p.GuestId).NodeId; got != p.NodeId || got == "" {
			t.Errorf("guest %s placed on %q, want %q", p.GuestId, got, p.NodeId)
		}
	}
	if again := scheduler.Plan(v); len(again) != 0 {
		t.Errorf("Plan() after committing = %v, want nothing left", again)
	}
}

// TestPlanUpTo: a pass limited to n entries places the first n waiting
// guests by name; passes one after the other place them all.
func TestPlanUpTo(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	for _, n := range []string{"a", "b", "c"} {
		r.enroll(n, 64, true)
	}
	names := make([]string, 70)
	for i := range names {
		names[i] = "g" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		r.createSmallGuest(names[i])
	}
	for pass := 0; ; pass++ {
		plan := scheduler.PlanUpTo(r.Store.Read(), 30)
		if len(plan) == 0 {
			break
		}
		if want := min(30, len(names)-30*pass); len(plan) != want || pass > 2 {
			t.Fatalf("pass %d: %d placements, want %d", pass, len(plan), want)
		}
		if first := r.Store.Read().Guest(plan[0].GuestId).Name; first != names[30*pass] {
			t.Errorf("pass %d starts with %s, want %s", pass, first, names[30*pass])
		}
		r.must(&corpusv1.Command{Cmd: &corpusv1.Command_PlaceGuests{PlaceGuests: &corpusv1.PlaceGuests{Placements: plan}}})
	}
	for _, g := range r.Store.Read().Guests() {
		if g.NodeId == "" {
			t.Errorf("guest %s not placed after the passes", g.Name)
		}
	}
}

func inSubnet(addr, subnet string) bool {
	p, err := netip.ParsePrefix(subnet)
	a, aerr := netip.ParseAddr(addr)
	return err == nil && aerr == nil && p.Contains(a)
}

// TestRoom: how many more copies of a guest fit, each counted against its
// node before the next, and why the next does not.
func TestRoom(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.enroll("a", 3, true)
	r.enroll("b", 2, true)
	g := &corpusv1.Guest{Name: "web", Spec: &corpusv1.GuestSpec{Driver: "lxc", Image: "busybox", Resources: &corpusv1.Resources{MemoryBytes: gib}}}
	view := r.Store.Read()
	if n, why := scheduler.Room(view, g, "", 4); n != 4 || why != "" {
		t.Errorf("Room for 4 of 1 GiB in 5 GiB = %d (%s)", n, why)
	}
	if n, why := scheduler.Room(view, g, "", 7); n != 5 || why == "" {
		t.Errorf("Room for 7 of 1 GiB in 5 GiB = %d (%q), want 5 and a reason", n, why)
	}
}

// TestPlanCountsIDRanges: a pass counts the id ranges it gives, so a node
// whose last range it gave takes no more unprivileged guests in that
// pass (they go elsewhere), while a privileged guest, which takes none,
// still goes there; by shape or by scan.
func TestPlanCountsIDRanges(t *testing.T) {
	// Not parallel: it switches the package's placement mode.
	for _, byShape := range []bool{true, false} {
		r := newReplica(t)
		for name, mem := range map[string]int64{"small": 4, "big": 8} {
			r.must(enrollCmds(name)...)
			report := reportCmd(name, mem, "v1")
			report.GetUpdateNode().Drivers[0].IdRanges = 2
			r.must(report)
		}
		for _, name := range []string{"g1", "g2", "g3", "g4"} {
			r.addGuest(name, func(g *corpusv1.Guest) {
				g.Spec.Resources = &corpusv1.Resources{MemoryBytes: gib / 2, CpuMillis: 100}
				g.Spec.Privileged = name == "g4"
			})
		}
		restore := scheduler.ByShape(byShape)
		plan := scheduler.Plan(r.Store.Read())
		restore()
		var got []string
		for _, p := range plan {
			got = append(got, p.NodeId)
		}
		want := []string{"small-id", "small-id", "big-id", "small-id"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("by shape %v: guests placed on %v, want %v (small, fuller, until its 2 ranges are given)", byShape, got, want)
		}
	}
}
