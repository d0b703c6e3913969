package state_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/compat"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// batchEntry is cmds as the leader proposes them in one batch entry.
func (r *replica) batchEntry(cmds ...*corpusv1.Command) *raft.Log {
	r.t.Helper()
	stamped := make([]*corpusv1.Command, len(cmds))
	for i, c := range cmds {
		stamped[i] = proto.Clone(c).(*corpusv1.Command)
		if _, err := state.Encode(stamped[i], r.now); err != nil {
			r.t.Fatalf("Encode(%v) = %v", c, err)
		}
	}
	data, err := state.EncodeBatch(stamped, r.now)
	if err != nil {
		r.t.Fatalf("EncodeBatch() = %v", err)
	}
	r.index++
	return &raft.Log{Index: r.index, Type: raft.LogCommand, Data: data}
}

// applyBatch commits cmds as the next log entry, one batch, and returns
// each one's business error.
func (r *replica) applyBatch(cmds ...*corpusv1.Command) []error {
	r.t.Helper()
	l := r.batchEntry(cmds...)
	got, ok := r.fsm.Apply(l).([]*state.Result)
	if !ok || len(got) != len(cmds) {
		r.t.Fatalf("Apply(batch of %d) = %v, want %d results", len(cmds), got, len(cmds))
	}
	errs := make([]error, len(got))
	for i, res := range got {
		if res.Index != l.Index {
			r.t.Errorf("Apply(batch)[%d].Index = %d, want %d", i, res.Index, l.Index)
		}
		errs[i] = res.Err
	}
	return errs
}

func atBatchVersion() *corpusv1.Command {
	return clusterVersionCmd(compat.Since(compat.BatchedEntries).String())
}

// TestApplyBatch: a batch's commands apply in order, each with its own
// answer; the one refused changes nothing, the others stand; each leaves
// its own audit entry at the entry's index, in its place.
func TestApplyBatch(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(atBatchVersion())
	user := addRecordCmd("r2", "b", "TXT", "2")
	user.Actor = "user:ann"
	errs := r.applyBatch(
		addRecordCmd("r1", "a", "TXT", "1"),
		addRecordCmd("r1", "a", "TXT", "1"), // the same id again: refused
		user,
		addRecordCmd("r3", "a", "CNAME", "c.example."), // a CNAME beside r1: refused
		state.BatchCommand([]*corpusv1.Command{addRecordCmd("r4", "d", "TXT", "4")}),
		addRecordCmd("r5", "a", "TXT", "5"), // sees r1, applied before it
	)
	want := []error{nil, state.ErrExists, nil, state.ErrConflict, state.ErrInvalid, nil}
	for i := range want {
		if !errors.Is(errs[i], want[i]) || (want[i] == nil) != (errs[i] == nil) {
			t.Errorf("Apply(batch)[%d] = %v, want %v", i, errs[i], want[i])
		}
	}
	v := r.store.Read()
	var ids []string
	for _, rec := range v.DNSRecords() {
		ids = append(ids, rec.Id)
		if rec.CreateIndex != r.index {
			t.Errorf("record %s CreateIndex = %d, want the batch's %d", rec.Id, rec.CreateIndex, r.index)
		}
	}
	slices.Sort(ids)
	if got := fmt.Sprint(ids); got != "[r1 r2 r5]" {
		t.Errorf("DNSRecords() = %s, want [r1 r2 r5]", got)
	}
	if got := v.Index(); got != r.index {
		t.Errorf("Index() = %d, want %d", got, r.index)
	}
	audit := v.Audit()
	audit = audit[len(audit)-len(want):]
	for i, e := range audit {
		ok := e.Result == "ok"
		if e.Index != r.index || e.Position != uint32(i) || ok != (want[i] == nil) {
			t.Errorf("Audit()[%d] = index %d position %d result %q, want index %d position %d, ok %v", i, e.Index, e.Position, e.Result, r.index, i, want[i] == nil)
		}
	}
	if audit[2].Actor != "user:ann" || audit[0].Actor != state.ActorSystem {
		t.Errorf("Audit() actors = %s, %s; want system, user:ann", audit[0].Actor, audit[2].Actor)
	}
}

// TestApplyBatchAllRefused: a batch whose every command is refused
// changes nothing but the audit log, not even the index, as a refused
// plain entry does.
func TestApplyBatchAllRefused(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(atBatchVersion(), addRecordCmd("r1", "a", "TXT", "1"))
	before, index := r.dump(), r.index
	errs := r.applyBatch(addRecordCmd("r1", "a", "TXT", "1"), addRecordCmd("r1", "b", "TXT", "1"))
	for i, err := range errs {
		if !errors.Is(err, state.ErrExists) {
			t.Errorf("Apply(batch)[%d] = %v, want ErrExists", i, err)
		}
	}
	if got := r.store.Read().Index(); got != index {
		t.Errorf("Index() = %d, want %d", got, index)
	}
	if after := r.dump(); !proto.Equal(after, before) {
		t.Errorf("state after a refused batch = %v, want it unchanged: %v", after, before)
	}
}

// TestApplyBatchBelowItsVersion: a batch entry in a group whose cluster
// version does not allow batches is refused, every command of it, alike
// on every replica (the leader's gate keeps it out of the log).
func TestApplyBatchBelowItsVersion(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(clusterVersionCmd("v0.1"))
	before := r.dump()
	for i, err := range r.applyBatch(addRecordCmd("r1", "a", "TXT", "1"), addRecordCmd("r2", "b", "TXT", "2")) {
		if !errors.Is(err, compat.ErrNeedsUpgrade) || !errors.Is(err, state.ErrBadTransition) {
			t.Errorf("Apply(batch)[%d] = %v, want ErrBadTransition wrapping ErrNeedsUpgrade", i, err)
		}
	}
	if after := r.dump(); !proto.Equal(after, before) {
		t.Errorf("state after a batch below its version = %v, want it unchanged: %v", after, before)
	}
	if err := compat.Gate(compat.Version{Major: 0, Minor: 1}, state.BatchCommand(nil)); !errors.Is(err, compat.ErrNeedsUpgrade) {
		t.Errorf("Gate(v0.1, batch) = %v, want ErrNeedsUpgrade", err)
	}
}

// TestBatchSnapshotAndReplay: a log of plain and batch entries, replayed
// on a fresh replica or restored from a snapshot and continued, gives
// the same state, audit log and applied index included.
func TestBatchSnapshotAndReplay(t *testing.T) {
	t.Parallel()
	a := newReplica(t)
	var log []*raft.Log
	plain := func(cmd *corpusv1.Command) {
		data, err := state.Encode(proto.Clone(cmd).(*corpusv1.Command), a.now)
		if err != nil {
			t.Fatal(err)
		}
		a.index++
		log = append(log, &raft.Log{Index: a.index, Type: raft.LogCommand, Data: data})
	}
	plain(atBatchVersion())
	for round := range 30 {
		if round%3 == 0 {
			plain(addRecordCmd(fmt.Sprintf("p%d", round), fmt.Sprintf("p%d", round), "TXT", "x"))
		}
		var cmds []*corpusv1.Command
		for i := range round%5 + 2 {
			// Every fourth name repeats one already taken: refused.
			n := fmt.Sprintf("b%d-%d", round, i)
			if i == 3 {
				n = fmt.Sprintf("b%d-0", round)
			}
			cmds = append(cmds, addRecordCmd(n, n, "TXT", "x"))
		}
		if round%7 == 0 {
			cmds = append(cmds, &corpusv1.Command{Ignorable: true, Cmd: &corpusv1.Command_RecordAudit{RecordAudit: &corpusv1.RecordAudit{Action: "exec", Target: "web"}}})
		}
		log = append(log, a.batchEntry(cmds...))
	}
	for _, l := range log[:len(log)/2] {
		a.fsm.Apply(l)
	}
	restored := newReplica(t)
	if err := restored.fsm.Restore(persistToFile(t, a.fsm, log[len(log)/2-1].Index)); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	replayed := newReplica(t)
	for _, l := range log[len(log)/2:] {
		a.fsm.Apply(l)
		restored.fsm.Apply(l)
	}
	for _, l := range log {
		replayed.fsm.Apply(l)
	}
	want := persisted(t, a.fsm)
	if len(want.Audit) < len(log) || len(want.DnsRecords) < 60 {
		t.Fatalf("the log left %d audit entries and %d records; the test means more", len(want.Audit), len(want.DnsRecords))
	}
	for name, r := range map[string]*replica{"replayed": replayed, "restored": restored} {
		if got := persisted(t, r.fsm); !proto.Equal(got, want) {
			t.Errorf("%s replica's state = %v, want %v", name, got, want)
		}
	}
}

// TestCheckLogReadsBatches: a cluster version past this binary, raised
// inside a batch entry, refuses the replica's start as a plain entry's
// does.
func TestCheckLogReadsBatches(t *testing.T) {
	t.Parallel()
	next := compat.Version{Major: compat.Current.Major, Minor: compat.Current.Minor + 1}
	r := newReplica(t)
	logs := raft.NewInmemStore()
	if err := logs.StoreLog(r.batchEntry(addRecordCmd("r1", "a", "TXT", "1"), clusterVersionCmd(next.String()))); err != nil {
		t.Fatal(err)
	}
	if err := compat.CheckLog(logs); err == nil || err.Error() != compat.TooOld(next) {
		t.Errorf("CheckLog(a batch raising the cluster version to %s) = %v, want %q", next, err, compat.TooOld(next))
	}
}
