package agent

import (
	"log/slog"
	"testing"

	corpusv1 "corpus/proto/corpus/v1"
)

// TestStaleDesired: a desired state older than the one held (a lower
// index, the same last restore) is ignored; the same or a newer index,
// the first state of all, and the first of a new restore (whose index
// may be lower: a cluster restored from an older snapshot) are taken.
func TestStaleDesired(t *testing.T) {
	a := &Agent{logger: slog.New(slog.DiscardHandler)}
	msg := func(index uint64, restore string) *corpusv1.WatchResponse {
		m := &corpusv1.WatchResponse{Index: index}
		if restore != "" {
			m.Restore = &corpusv1.Restore{Id: restore}
		}
		return m
	}
	if a.staleDesired(msg(5, ""), "c1") {
		t.Error("the first desired state was taken for stale")
	}
	a.known, a.index = true, 50
	for _, tc := range []struct {
		index   uint64
		restore string
		stale   bool
	}{
		{40, "", true},
		{49, "", true},
		{50, "", false},
		{60, "", false},
		{41, "r1", false},
	} {
		if got := a.staleDesired(msg(tc.index, tc.restore), "c1"); got != tc.stale {
			t.Errorf("index %d, restore %q, holding index 50 = stale %v, want %v", tc.index, tc.restore, got, tc.stale)
		}
	}
	a.restore = "r1"
	if !a.staleDesired(msg(41, "r1"), "c1") || a.staleDesired(msg(41, ""), "c1") {
		t.Error("after restore r1 at index 50: index 41 of r1 must be stale, of no restore (another history) not")
	}
}
