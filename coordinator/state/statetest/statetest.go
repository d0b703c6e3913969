// Package statetest gives tests a replicated state without a Raft group:
// a store restored from a snapshot, the state machine's own way in, or a
// replica that applies commands as they are proposed.
package statetest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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

// Replica is a store and the real state machine over it, without a Raft
// group: Propose applies a command as the next log entry, stamped with
// Now, as the leader would have it committed.
type Replica struct {
	Store *state.Store
	// Now is the leader's clock the entries carry.
	Now func() time.Time

	mu    sync.Mutex
	fsm   *state.FSM
	index uint64
}

// NewReplica returns an empty replica whose entries carry now's time.
func NewReplica(now func() time.Time) *Replica {
	store := state.NewStore()
	return &Replica{Store: store, Now: now, fsm: state.NewFSM(store, slog.New(slog.DiscardHandler))}
}

// Propose applies cmd and returns its index and business error, as a
// commit through Raft does.
func (r *Replica) Propose(_ context.Context, cmd *corpusv1.Command) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	data, err := state.Encode(cmd, r.Now())
	if err != nil {
		return 0, err
	}
	r.index++
	res := r.fsm.Apply(&raft.Log{Index: r.index, Type: raft.LogCommand, Data: data}).(*state.Result)
	return res.Index, res.Err
}

// Index is the index of the last entry applied.
func (r *Replica) Index() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.index
}
