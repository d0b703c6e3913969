package state

import (
	"bytes"
	"io"
	"log/slog"

	corpusv1 "corpus/proto/corpus/v1"
)

// CheckSnapshot is nil when this binary can restore snap, else why not (a
// newer format, a cluster version past this binary): what Restore checks,
// for a restore from a snapshot file to check before writing anything.
func CheckSnapshot(snap *corpusv1.Snapshot) error {
	_, err := checkSnapshot(snap)
	return err
}

// CheckRestore is nil when Restore takes data (a marshalled
// corpusv1.Snapshot), else why not: it restores data into a state of its
// own and drops it. Raft panics a replica whose state machine refuses a
// snapshot Raft installs (a leader's user restore, a follower's install
// from its leader), so a snapshot from outside the group is tried this
// way before Raft is given it: one with a row the state cannot index (a
// guest without an id, say) is refused, and nothing changed.
func CheckRestore(data []byte) error {
	return NewFSM(NewStore(), slog.New(slog.DiscardHandler)).Restore(io.NopCloser(bytes.NewReader(data)))
}
