package state_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/fit"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// rangesNodeCmd reports node id's lxc driver with ranges id ranges.
func rangesNodeCmd(id string, ranges uint32) *corpusv1.Command {
	c := updateNodeCmd(id, 8<<30)
	c.GetUpdateNode().Drivers[0].IdRanges = ranges
	return c
}

func privilegedGuestCmd(id, name string) *corpusv1.Command {
	c := guestCmd(id, name)
	c.GetCreateGuest().Guest.Spec.Privileged = true
	return c
}

// ranges returns the id range of each named guest, by id.
func (r *replica) ranges(ids ...string) []uint32 {
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = r.store.Read().Guest(id).GetIdRange()
	}
	return out
}

func sameRanges(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestIDRangesOnPlacement: guests placed on a node that keeps id ranges
// get the lowest free ones, distinct (also within one entry); a
// privileged guest takes none; a node with none free takes no more
// unprivileged guests, and a deleted guest's range is given again once
// its node confirmed it gone.
func TestIDRangesOnPlacement(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(append(cluster(), clusterVersionCmd("v0.1"), rangesNodeCmd(nodeID, 3),
		guestCmd("g1", "a"), guestCmd("g2", "b"), privilegedGuestCmd("g3", "p"), guestCmd("g4", "c"), guestCmd("g5", "d"))...)
	r.must(placeAllCmd(placement("g1", nodeID, 0), placement("g2", nodeID, 0), placement("g3", nodeID, 0)))
	if got := r.ranges("g1", "g2", "g3"); !sameRanges(got, []uint32{1, 2, 0}) {
		t.Fatalf("ranges of a, b, p = %v, want 1 2 0", got)
	}
	r.must(placeAllCmd(placement("g4", nodeID, 0)))
	if got := r.ranges("g4"); got[0] != 3 {
		t.Fatalf("range of c = %d, want 3", got[0])
	}
	before := r.dump()
	if err := r.apply(placeAllCmd(placement("g5", nodeID, 0))); !errors.Is(err, state.ErrStale) || !strings.Contains(err.Error(), "out of guest id ranges") {
		t.Fatalf("placing d on a node with no range free = %v, want it refused (out of guest id ranges)", err)
	}
	if after := r.dump(); !proto.Equal(after, before) {
		t.Errorf("a refused placement changed the state")
	}
	v := r.store.Read()
	n := v.Node(nodeID)
	if why := fit.Unfit(n, v.NodeAllocated(nodeID), v.UsedPorts(n), len(v.NodeIDRanges(nodeID)), v.Guest("g5").Spec, ""); why != "out of guest id ranges" {
		t.Errorf("Unfit(d) = %q, want out of guest id ranges", why)
	}
	if why := fit.Unfit(n, v.NodeAllocated(nodeID), v.UsedPorts(n), len(v.NodeIDRanges(nodeID)), v.Guest("g3").Spec, ""); why != "" {
		t.Errorf("Unfit(a privileged guest) = %q, want it to fit (it takes no range)", why)
	}

	// b's delete: its range is held until its node confirms.
	r.must(desiredCmd("b", state.DesiredDeleted))
	if err := r.apply(placeAllCmd(placement("g5", nodeID, 0))); err == nil {
		t.Fatalf("d placed while b, being deleted, still holds its range")
	}
	r.must(reportCmd(nodeID, "g2", state.ObservedDeleted, ""))
	r.must(placeAllCmd(placement("g5", nodeID, 0)))
	if got := r.ranges("g1", "g4", "g5"); !sameRanges(got, []uint32{1, 3, 2}) {
		t.Errorf("ranges of a, c, d = %v, want 1 3 2 (d reuses b's)", got)
	}
}

// TestIDRangesAcrossNodes: a guest moved from a node that is down gets a
// range on its new node; one migrating from a draining node gets one
// there while its old copy keeps its range on the old node until the
// new copy runs.
func TestIDRangesAcrossNodes(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(append(twoNodes(), clusterVersionCmd("v0.1"), rangesNodeCmd(nodeID, 10), rangesNodeCmd("n2id", 10),
		guestCmd("g1", "a"), guestCmd("g2", "b"), guestCmd("g3", "c"), guestCmd("g4", "x"))...)
	r.must(placeAllCmd(placement("g1", nodeID, 0), placement("g2", nodeID, 0), placement("g4", "n2id", 0)))
	if got := r.ranges("g1", "g2", "g4"); !sameRanges(got, []uint32{1, 2, 1}) {
		t.Fatalf("ranges of a, b on n1 and x on n2 = %v, want 1 2 1 (ranges are per node)", got)
	}

	// Draining n1: b migrates to n2, its old copy keeps range 2 on n1.
	r.must(modeCmd(nodeID, state.ModeDrain, ""))
	r.must(placeAllCmd(placement("g2", "n2id", r.guestIndex("g2"))))
	g := r.store.Read().Guest("g2")
	if g.IdRange != 2 || g.PreviousIdRange != 2 {
		t.Errorf("migrating b: range %d on n2, %d on n1; want 2 on each (lowest free on n2, kept on n1)", g.IdRange, g.PreviousIdRange)
	}
	if used := r.store.Read().NodeIDRanges(nodeID); !used[2] {
		t.Errorf("n1's taken ranges %v lack the old copy's 2", used)
	}
	r.must(reportCmd("n2id", "g2", state.ObservedRunning, ""))
	if g := r.store.Read().Guest("g2"); g.PreviousIdRange != 0 || r.store.Read().NodeIDRanges(nodeID)[2] {
		t.Errorf("after the migration: old range %d, n1's taken %v; want it freed", g.PreviousIdRange, r.store.Read().NodeIDRanges(nodeID))
	}

	// n1 down: a moves to n2 and gets the lowest range free there.
	r.must(modeCmd(nodeID, state.ModeDev, ""), nodeStatusCmd(nodeID, state.NodeDown))
	r.must(placeAllCmd(placement("g1", "n2id", r.guestIndex("g1"))))
	if got := r.ranges("g1"); got[0] != 3 {
		t.Errorf("range of a rescheduled to n2 = %d, want 3 (x has 1, b 2)", got[0])
	}
}

// TestIDRangesForOlderGuests: guests placed while their node kept no
// ranges (its agent predates them, or root had too few ids) share range
// 0; once the node reports ranges they get their own, in name order, and
// a guest event says they move at their next start.
func TestIDRangesForOlderGuests(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(append(cluster(), clusterVersionCmd("v0.1"), guestCmd("g1", "b"), guestCmd("g2", "a"), privilegedGuestCmd("g3", "p"))...)
	r.must(placeAllCmd(placement("g1", nodeID, 0), placement("g2", nodeID, 0), placement("g3", nodeID, 0)))
	if got := r.ranges("g1", "g2", "g3"); !sameRanges(got, []uint32{0, 0, 0}) {
		t.Fatalf("ranges on a node without any = %v, want 0 0 0", got)
	}
	r.must(rangesNodeCmd(nodeID, 5))
	if got := r.ranges("g1", "g2", "g3"); !sameRanges(got, []uint32{2, 1, 0}) {
		t.Errorf("ranges once the node has some = %v, want b 2, a 1, p 0", got)
	}
	if ev := r.store.Read().Guest("g2").Events; !strings.Contains(ev[len(ev)-1].Message, "next start") {
		t.Errorf("last event of a = %v, want one saying it moves at its next start", ev[len(ev)-1])
	}
	// The same entries give every replica the same ranges.
	other := newReplica(t)
	other.must(append(cluster(), clusterVersionCmd("v0.1"), guestCmd("g1", "b"), guestCmd("g2", "a"), privilegedGuestCmd("g3", "p"))...)
	other.must(placeAllCmd(placement("g1", nodeID, 0), placement("g2", nodeID, 0), placement("g3", nodeID, 0)), rangesNodeCmd(nodeID, 5))
	if !proto.Equal(other.dump(), r.dump()) {
		t.Errorf("two replicas applying the same entries differ")
	}
}
