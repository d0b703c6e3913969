package state_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// busy brings a replica to a state with something in every table.
func busy(t *testing.T) *replica {
	r := newReplica(t)
	r.must(withPlacedGuest()...)
	r.must(
		reportCmd(nodeID, guestID, state.ObservedRunning, ""),
		tokenCmd("tok2", "hash2", epoch.Add(time.Hour)),
		enrollCmd("tok2", "hash2", "n2id", "n2"),
		tokenCmd("tok3", "hash3", epoch.Add(time.Hour)),
		guestCmd("g2id", "api"),
		placeCmd("g2id", "", "no room", 0),
	)
	return r
}

// persistToFile writes a snapshot of fsm into a raft file snapshot store
// and returns a reader of what was stored.
func persistToFile(t *testing.T, fsm *state.FSM, index uint64) io.ReadCloser {
	t.Helper()
	snap, err := fsm.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot() = %v", err)
	}
	defer snap.Release()
	return persistSnapshot(t, snap, index)
}

func persistSnapshot(t *testing.T, snap raft.FSMSnapshot, index uint64) io.ReadCloser {
	t.Helper()
	files, err := raft.NewFileSnapshotStore(t.TempDir(), 1, io.Discard)
	if err != nil {
		t.Fatalf("NewFileSnapshotStore() = %v", err)
	}
	sink, err := files.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatalf("Create() = %v", err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("Persist() = %v", err)
	}
	metas, err := files.List()
	if err != nil || len(metas) != 1 {
		t.Fatalf("List() = %v, %v, want one snapshot", metas, err)
	}
	_, rc, err := files.Open(metas[0].ID)
	if err != nil {
		t.Fatalf("Open(%s) = %v", metas[0].ID, err)
	}
	return rc
}

func TestSnapshotRestore(t *testing.T) {
	t.Parallel()
	r := busy(t)
	want := r.dump()

	restored := newReplica(t)
	if err := restored.fsm.Restore(persistToFile(t, r.fsm, r.index)); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	restored.index = r.index
	if got := restored.dump(); !proto.Equal(got, want) {
		t.Fatalf("state after Restore = %v, want %v", got, want)
	}

	// The secondary indexes are rebuilt, not just the rows.
	v := restored.store.Read()
	if got := v.Index(); got != r.index {
		t.Errorf("Index() = %d, want %d", got, r.index)
	}
	if g := v.GuestByName(guestName); g.GetId() != guestID {
		t.Errorf("GuestByName(%s) = %v, want id %s", guestName, g, guestID)
	}
	if n := v.NodeByName("n2"); n.GetId() != "n2id" {
		t.Errorf("NodeByName(n2) = %v, want id n2id", n)
	}
	if got := v.GuestsOnNode(nodeID); len(got) != 1 || got[0].Id != guestID {
		t.Errorf("GuestsOnNode(%s) = %v, want [%s]", nodeID, got, guestName)
	}

	// Both replicas go on identically from there.
	for _, cmd := range []*corpusv1.Command{
		enrollCmd("tok2", "hash2", "n3id", "n3"), // used before the snapshot
		enrollCmd("tok3", "hash3", "n3id", "n3"),
		desiredCmd(guestName, state.DesiredDeleted),
		reportCmd(nodeID, guestID, state.ObservedDeleted, ""),
	} {
		errA, errB := r.apply(cmd), restored.apply(cmd)
		if !errors.Is(errA, errB) && !errors.Is(errB, errA) {
			t.Errorf("Apply(%v) = %v on the original, %v on the restored replica", cmd, errA, errB)
		}
	}
	if got, want := restored.dump(), r.dump(); !proto.Equal(got, want) {
		t.Errorf("restored replica diverged: %v, want %v", got, want)
	}
}

func TestSnapshotIsPointInTime(t *testing.T) {
	t.Parallel()
	r := busy(t)
	want := r.dump()
	snap, err := r.fsm.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot() = %v", err)
	}
	defer snap.Release()
	// Raft goes on applying while the snapshot is persisted.
	r.must(guestCmd("g3id", "late"), desiredCmd(guestName, state.DesiredStopped))

	restored := newReplica(t)
	if err := restored.fsm.Restore(persistSnapshot(t, snap, want.Index)); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	if got := restored.dump(); !proto.Equal(got, want) {
		t.Errorf("state after Restore = %v, want the state when Snapshot was called: %v", got, want)
	}
}

func TestRestoreWakesWatchers(t *testing.T) {
	t.Parallel()
	r := busy(t)
	rc := persistToFile(t, r.fsm, r.index)

	abandon := r.store.AbandonCh()
	v := r.store.Read()
	v.Guest(guestID)
	woke := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testrun.D(10*time.Second))
		defer cancel()
		woke <- v.Wait(ctx)
	}()
	// Restoring the same contents still replaces the database, so every
	// watcher must re-read.
	if err := r.fsm.Restore(rc); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	if err := <-woke; err != nil {
		t.Errorf("Wait() after Restore = %v, want nil", err)
	}
	select {
	case <-abandon:
	default:
		t.Errorf("AbandonCh() is still open after Restore")
	}
	if r.store.AbandonCh() == abandon {
		t.Errorf("AbandonCh() after Restore is the closed channel, want a fresh one")
	}
}

func TestRestoreRefuses(t *testing.T) {
	t.Parallel()
	newer, err := proto.Marshal(&corpusv1.Snapshot{Version: state.CommandVersion + 1})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"garbage", []byte{0xff, 0xff, 0xff}},
		{"newer version", newer},
		{"node without indexable fields", func() []byte {
			b, _ := proto.Marshal(&corpusv1.Snapshot{Nodes: []*corpusv1.Node{{}}})
			return b
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := busy(t)
			want := r.dump()
			abandon := r.store.AbandonCh()
			sink := &memSink{}
			sink.Write(tt.data)
			if err := r.fsm.Restore(sink.reader()); err == nil {
				t.Fatalf("Restore(%s) = nil, want an error", tt.name)
			}
			if got := r.dump(); !proto.Equal(got, want) {
				t.Errorf("state after a failed Restore = %v, want it unchanged: %v", got, want)
			}
			select {
			case <-abandon:
				t.Errorf("AbandonCh() closed by a failed Restore")
			default:
			}
		})
	}
}

func TestSnapWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		read   func(v *state.Snap)
		change *corpusv1.Command
		wake   bool
	}{
		{
			name:   "watched guest changes",
			read:   func(v *state.Snap) { v.GuestByName(guestName) },
			change: desiredCmd(guestName, state.DesiredStopped),
			wake:   true,
		},
		{
			name:   "watched guest by id is deleted",
			read:   func(v *state.Snap) { v.Guest("g2id") },
			change: desiredCmd("api", state.DesiredDeleted),
			wake:   true,
		},
		{
			name:   "a guest appears under a watched name",
			read:   func(v *state.Snap) { v.GuestByName("db") },
			change: guestCmd("g3id", "db"),
			wake:   true,
		},
		{
			name:   "a guest is placed on a watched node",
			read:   func(v *state.Snap) { v.GuestsOnNode("n2id") },
			change: placeCmd("g2id", "n2id", "", 0),
			wake:   true,
		},
		{
			name:   "the node list changes",
			read:   func(v *state.Snap) { v.Nodes() },
			change: nodeStatusCmd("n2id", state.NodeDown),
			wake:   true,
		},
		{
			name:   "any change wakes an index watch",
			read:   func(v *state.Snap) { v.WatchIndex() },
			change: tokenCmd("tok9", "hash9", epoch.Add(time.Hour)),
			wake:   true,
		},
		{
			name:   "another guest changes",
			read:   func(v *state.Snap) { v.Guest(guestID) },
			change: desiredCmd("api", state.DesiredStopped),
		},
		{
			name:   "a node changes under a guest watch",
			read:   func(v *state.Snap) { v.GuestsOnNode(nodeID) },
			change: nodeStatusCmd(nodeID, state.NodeDown),
		},
		{
			name:   "a business error",
			read:   func(v *state.Snap) { v.WatchIndex(); v.Guests() },
			change: guestCmd("g9id", guestName),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := busy(t)
			v := r.store.Read()
			tt.read(v)
			woke := make(chan error, 1)
			timeout := 10 * time.Second
			if !tt.wake {
				// Long enough to see a wrong wake-up in practice; a
				// failure here is never a false alarm.
				timeout = 50 * time.Millisecond
			}
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), testrun.D(timeout))
				defer cancel()
				woke <- v.Wait(ctx)
			}()
			r.apply(tt.change)
			err := <-woke
			switch {
			case tt.wake && err != nil:
				t.Errorf("Wait() after %v = %v, want nil", tt.change, err)
			case !tt.wake && !errors.Is(err, context.DeadlineExceeded):
				t.Errorf("Wait() after %v = %v, want %v", tt.change, err, context.DeadlineExceeded)
			}
		})
	}
}

func TestSnapWaitCancel(t *testing.T) {
	t.Parallel()
	r := busy(t)
	v := r.store.Read()
	v.Guests()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := v.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait(cancelled) = %v, want %v", err, context.Canceled)
	}
}

// TestStoreApplied: the store's applied index follows every entry, a
// refused write included (the state's own index does not), and a
// snapshot carries it.
func TestStoreApplied(t *testing.T) {
	r := newReplica(t)
	r.must(cluster()...)
	ok := r.index
	if err := r.apply(&corpusv1.Command{Cmd: &corpusv1.Command_DeleteExtension{DeleteExtension: &corpusv1.DeleteExtension{Name: "none"}}}); err == nil {
		t.Fatal("deleting an extension that is not there succeeded")
	}
	if got := r.store.Applied(); got != r.index || r.store.Read().Index() != ok {
		t.Errorf("after a refused write: applied %d (want %d), state index %d (want %d)", got, r.index, r.store.Read().Index(), ok)
	}
	other := newReplica(t)
	if err := other.fsm.Restore(persistToFile(t, r.fsm, r.index)); err != nil {
		t.Fatal(err)
	}
	if got := other.store.Applied(); got != r.index {
		t.Errorf("applied after a restore: %d, want %d", got, r.index)
	}
}

// TestClusterTimeNeverGoesBack: an entry stamped by a leader whose clock
// stepped back applies at the latest time applied before it, on every
// replica, restored ones too; so an expired join token stays expired.
func TestClusterTimeNeverGoesBack(t *testing.T) {
	r := newReplica(t)
	r.must(bootstrapCmd("c1"), tokenCmd(tokenID, tokenHash, epoch.Add(time.Hour)))
	r.now = epoch.Add(2 * time.Hour)
	r.must(guestCmd("g0id", "ahead"))
	if got := r.store.AppliedTime(); !got.Equal(r.now) {
		t.Fatalf("AppliedTime = %s, want %s", got, r.now)
	}
	// The next leader's clock is two hours behind: the token looks valid
	// to it, not to the cluster.
	r.now = epoch
	if err := r.apply(enrollCmd(tokenID, tokenHash, nodeID, nodeName)); !errors.Is(err, state.ErrInvalidToken) {
		t.Fatalf("enrolling with a token expired by the cluster's time = %v, want %v", err, state.ErrInvalidToken)
	}
	r.must(guestCmd("g1id", "behind"))
	if got, want := r.store.Read().GuestByName("behind").CreatedAt.AsTime(), epoch.Add(2*time.Hour); !got.Equal(want) {
		t.Fatalf("a guest created by the slow leader is dated %s, want %s (the latest time applied)", got, want)
	}

	restored := newReplica(t)
	if err := restored.fsm.Restore(persistToFile(t, r.fsm, r.index)); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	if got, want := restored.store.AppliedTime(), epoch.Add(2*time.Hour); !got.Equal(want) {
		t.Fatalf("restored AppliedTime = %s, want %s", got, want)
	}
	restored.index, restored.now = r.index, epoch
	if err := restored.apply(enrollCmd(tokenID, tokenHash, nodeID, nodeName)); !errors.Is(err, state.ErrInvalidToken) {
		t.Fatalf("restored replica: enrolling with the expired token = %v, want %v", err, state.ErrInvalidToken)
	}
	// Time moves on when a leader's clock passes the cluster's.
	restored.now = epoch.Add(3 * time.Hour)
	restored.must(guestCmd("g2id", "later"))
	if got := restored.store.AppliedTime(); !got.Equal(restored.now) {
		t.Fatalf("AppliedTime = %s, want %s", got, restored.now)
	}
}
