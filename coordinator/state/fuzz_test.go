package state_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// FuzzApply feeds arbitrary bytes to the state machine as a log entry on
// top of a populated state. An entry either applies (with or without a
// business error) or panics for one of the two documented reasons: it is
// corrupt, or it is an unknown command not marked ignorable. Whatever it
// does, a business error changes nothing and the resulting state survives
// a snapshot and restore unchanged.
func FuzzApply(f *testing.F) {
	seeds := append(withPlacedGuest(),
		reportCmd(nodeID, guestID, state.ObservedDeleted, ""),
		reportCmd(nodeID, guestID, state.ObservedFailed, "oom"),
		desiredCmd(guestName, state.DesiredDeleted),
		desiredCmd("api", state.DesiredDeleted),
		placeCmd("g2id", nodeID, "", 0),
		placeCmd("g2id", "", "why", 0),
		nodeStatusCmd("n2id", state.NodeDown),
		nodeStatusCmd(nodeID, state.NodeDown),
		modeCmd(nodeID, state.ModeDrain, ""),
		modeCmd("n2id", "", "ineligible"),
		placeAllCmd(placement("g2id", nodeID, 0), placement(guestID, "n2id", 0)),
		placeAllCmd(&corpusv1.PlaceGuest{GuestId: "g2id", Reason: "why"}),
		enrollCmd("tok3", "hash3", "n3id", "n3"),
		tokenCmd("tok4", "hash4", epoch.Add(time.Minute)),
	)
	for _, cmd := range seeds {
		data, err := state.Encode(cmd, epoch)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := busy(t)
		before := r.dump()
		res := applyRaw(t, r, data)
		if res == nil {
			return // panicked for a documented reason
		}
		after := r.dump()
		if res.Err != nil && !proto.Equal(after, before) {
			t.Fatalf("Apply(%x) = %v and changed the state: %v, want it unchanged: %v", data, res.Err, after, before)
		}
		restored := newReplica(t)
		sink := &memSink{}
		snap, err := r.fsm.Snapshot()
		if err != nil {
			t.Fatalf("Snapshot() = %v", err)
		}
		if err := snap.Persist(sink); err != nil {
			t.Fatalf("Persist() = %v", err)
		}
		if err := restored.fsm.Restore(sink.reader()); err != nil {
			t.Fatalf("Restore() after Apply(%x) = %v", data, err)
		}
		if got := restored.dump(); !proto.Equal(got, after) {
			t.Fatalf("Restore() after Apply(%x) = %v, want %v", data, got, after)
		}
	})
}

// applyRaw applies data at the next index. It returns nil when Apply
// panicked for a documented reason and fails the test on any other panic.
func applyRaw(t *testing.T, r *replica, data []byte) (res *state.Result) {
	t.Helper()
	r.index++
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		msg, _ := p.(string)
		if !strings.HasPrefix(msg, "state: corrupt raft entry") && !strings.HasPrefix(msg, "state: unknown command") && !strings.HasPrefix(msg, "state: this group's cluster version") {
			t.Fatalf("Apply(%x) panicked with %v, want only corrupt-entry or unknown-command panics", data, p)
		}
		res = nil
	}()
	got := r.fsm.Apply(&raft.Log{Index: r.index, Type: raft.LogCommand, Data: data})
	res, ok := got.(*state.Result)
	if !ok || res.Index != r.index {
		t.Fatalf("Apply(%x) = %v, want a *state.Result for index %d", data, got, r.index)
	}
	return res
}
