package agent

import (
	"log/slog"
	"path/filepath"
	"testing"

	"corpus/agent/cache"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestOrphansAfterRestore: the first desired state of a restored cluster
// makes the guests it lacks that were created after the snapshot's index
// orphans, kept across a restart; those the snapshot predates, a later
// ordinary deletion and a second message of the same restore do not.
func TestOrphansAfterRestore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.db")
	c, err := cache.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { c.Close() }()
	a := &Agent{cache: c, logger: slog.New(slog.DiscardHandler)}
	guest := func(id string, created uint64) *corpusv1.Guest {
		return &corpusv1.Guest{Id: id, Name: "g-" + id, CreateIndex: created}
	}
	// What setDesired does with the guests and the restore id.
	apply := func(msg *corpusv1.WatchResponse) {
		a.noteRestore(msg)
		a.mu.Lock()
		a.desired = map[string]*corpusv1.Guest{}
		for _, g := range msg.Guests {
			a.desired[g.Id] = g
		}
		a.restore, a.known = msg.GetRestore().GetId(), true
		a.mu.Unlock()
	}
	// "gone" was deleted before the snapshot, while this agent was away
	// (its last desired state still had it).
	apply(&corpusv1.WatchResponse{Index: 50, Guests: []*corpusv1.Guest{guest("old", 10), guest("gone", 5), guest("deleted", 20), guest("late", 45)}})
	// Restored from a snapshot at index 40: "deleted" was deleted after it
	// and is desired again; "late" was created after it; "gone" is removed.
	restore := &corpusv1.Restore{Id: "r1", SnapshotIndex: 40}
	apply(&corpusv1.WatchResponse{Index: 41, Restore: restore, Guests: []*corpusv1.Guest{guest("old", 10), guest("deleted", 20)}})
	if len(a.orphans) != 1 || a.orphans["late"] != "g-late" {
		t.Fatalf("orphans = %v, want late only", a.orphans)
	}
	// An ordinary deletion afterwards, same restore: removed as usual.
	apply(&corpusv1.WatchResponse{Index: 60, Restore: restore, Guests: []*corpusv1.Guest{guest("old", 10)}})
	if len(a.orphans) != 1 {
		t.Errorf("orphans after an ordinary deletion = %v, want late only", a.orphans)
	}
	// A restart keeps them.
	c.Close()
	if c, err = cache.Open(path); err != nil {
		t.Fatal(err)
	}
	b := &Agent{cache: c, logger: slog.New(slog.DiscardHandler)}
	b.loadOrphans()
	if b.orphans["late"] != "g-late" {
		t.Errorf("orphans after a restart = %v, want late", b.orphans)
	}
}
