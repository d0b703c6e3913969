// Package statetest gives tests a replicated state to read without a Raft
// group: a store restored from a snapshot, the state machine's own way
// in.
package statetest

import (
	"bytes"
	"io"
	"log/slog"
	"testing"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// Store returns a store holding what snap holds (its Version is set to
// the current one); a snapshot the state machine refuses fails the test.
func Store(t testing.TB, snap *corpusv1.Snapshot) *state.Store {
	t.Helper()
	snap.Version = state.CommandVersion
	b, err := proto.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	store := state.NewStore()
	if err := state.NewFSM(store, slog.New(slog.DiscardHandler)).Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	return store
}
