package tokenuse

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"corpus/coordinator/state"
	"corpus/internal/clock"
	corpusv1 "corpus/proto/corpus/v1"
)

// group is a store and the real FSM over it; propose applies a command
// as the next log entry, stamped with the clock, as the leader would.
type group struct {
	t     *testing.T
	store *state.Store
	fsm   *state.FSM
	index uint64
	clock clock.Func
	n     int // TouchUserTokens entries applied
}

func (g *group) propose(_ context.Context, cmd *corpusv1.Command) (uint64, error) {
	data, err := state.Encode(cmd, g.clock.Now())
	if err != nil {
		g.t.Fatal(err)
	}
	g.index++
	res := g.fsm.Apply(&raft.Log{Index: g.index, Type: raft.LogCommand, Data: data}).(*state.Result)
	if res.Err == nil && cmd.GetTouchUserTokens() != nil {
		g.n++
	}
	return res.Index, res.Err
}

// TestUseJustAfterARecordedOneLands: a use made less than an interval
// after the token's recorded last use waits, and is written by the first
// flush an interval past that record even when no later use comes; uses
// meanwhile cost no entry, and one the state already holds none.
func TestUseJustAfterARecordedOneLands(t *testing.T) {
	const interval = time.Second
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	g := &group{t: t, store: state.NewStore(), clock: func() time.Time { return now }}
	g.fsm = state.NewFSM(g.store, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	for _, cmd := range []*corpusv1.Command{
		{Cmd: &corpusv1.Command_SetClusterVersion{SetClusterVersion: &corpusv1.SetClusterVersion{Version: "v0.2"}}},
		{Cmd: &corpusv1.Command_CreateUser{CreateUser: &corpusv1.CreateUser{User: &corpusv1.User{Name: "alice", Role: "dev"}}}},
		{Cmd: &corpusv1.Command_CreateUserToken{CreateUserToken: &corpusv1.CreateUserToken{Token: &corpusv1.UserToken{Id: "a", User: "alice", SecretHash: "ha"}}}},
	} {
		if _, err := g.propose(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	r := &Recorder{Store: g.store, Propose: g.propose, Interval: interval, Clock: g.clock, Logger: slog.New(slog.DiscardHandler)}
	last := func() time.Time { return g.store.Read().UserToken("a").GetLastUsedAt().AsTime() }

	first := now
	r.Use("a", "10.0.0.1:4000")
	r.flush(ctx)
	if !last().Equal(first) || g.n != 1 {
		t.Fatalf("after the first use: last use %v in %d entries, want %v in 1", last(), g.n, first)
	}

	// The next use, 50ms later, and nothing after it.
	now = now.Add(50 * time.Millisecond)
	second := now
	r.Use("a", "10.0.0.1:4001")
	for _, step := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 300 * time.Millisecond} {
		now = now.Add(step)
		r.flush(ctx)
		if !last().Equal(first) || g.n != 1 {
			t.Fatalf("%s after the record: last use %v in %d entries, want it to wait", now.Sub(first), last(), g.n)
		}
	}
	now = now.Add(100 * time.Millisecond) // an interval past the record
	r.flush(ctx)
	if !last().Equal(second) || g.n != 2 {
		t.Fatalf("an interval after the record: last use %v in %d entries, want %v in 2", last(), g.n, second)
	}
	r.flush(ctx)
	if g.n != 2 {
		t.Errorf("a flush with nothing new wrote an entry (%d)", g.n)
	}

	// From another address the use is written at once.
	now = now.Add(10 * time.Millisecond)
	r.Use("a", "10.0.0.2:4000")
	r.flush(ctx)
	if !last().Equal(now) || g.store.Read().UserToken("a").GetLastUsedFrom() != "10.0.0.2" || g.n != 3 {
		t.Errorf("a use from another address: last use %v from %q in %d entries, want %v from 10.0.0.2 in 3",
			last(), g.store.Read().UserToken("a").GetLastUsedFrom(), g.n, now)
	}
}
