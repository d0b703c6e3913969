package tokenuse

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"corpus/coordinator/state/statetest"
	"corpus/internal/clock"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestUseJustAfterARecordedOneLands: a use made less than an interval
// after the token's recorded last use waits, and is written by the first
// flush an interval past that record even when no later use comes; the
// flushes meanwhile, and one with nothing noted, write no entry; a use
// from another address is written at once.
func TestUseJustAfterARecordedOneLands(t *testing.T) {
	const interval = time.Second
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func() time.Time { return now }
	rep := statetest.NewReplica(at)
	touches := 0 // TouchUserTokens entries applied
	propose := func(ctx context.Context, cmd *corpusv1.Command) (uint64, error) {
		i, err := rep.Propose(ctx, cmd)
		if err == nil && cmd.GetTouchUserTokens() != nil {
			touches++
		}
		return i, err
	}
	ctx := context.Background()
	for _, cmd := range []*corpusv1.Command{
		{Cmd: &corpusv1.Command_SetClusterVersion{SetClusterVersion: &corpusv1.SetClusterVersion{Version: "v0.2"}}},
		{Cmd: &corpusv1.Command_CreateUser{CreateUser: &corpusv1.CreateUser{User: &corpusv1.User{Name: "alice", Role: "dev"}}}},
		{Cmd: &corpusv1.Command_CreateUserToken{CreateUserToken: &corpusv1.CreateUserToken{Token: &corpusv1.UserToken{Id: "a", User: "alice", SecretHash: "ha"}}}},
	} {
		if _, err := propose(ctx, cmd); err != nil {
			t.Fatal(err)
		}
	}
	r := &Recorder{Store: rep.Store, Propose: propose, Interval: interval, Clock: clock.Func(at), Logger: slog.New(slog.DiscardHandler)}
	last := func() time.Time { return rep.Store.Read().UserToken("a").GetLastUsedAt().AsTime() }

	first := now
	r.Use("a", "10.0.0.1:4000")
	r.flush(ctx)
	if !last().Equal(first) || touches != 1 {
		t.Fatalf("after the first use: last use %v in %d entries, want %v in 1", last(), touches, first)
	}

	// The next use, 50ms later, and nothing after it.
	now = now.Add(50 * time.Millisecond)
	second := now
	r.Use("a", "10.0.0.1:4001")
	for _, step := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 300 * time.Millisecond} {
		now = now.Add(step)
		r.flush(ctx)
		if !last().Equal(first) || touches != 1 {
			t.Fatalf("%s after the record: last use %v in %d entries, want it to wait", now.Sub(first), last(), touches)
		}
	}
	now = now.Add(100 * time.Millisecond) // an interval past the record
	r.flush(ctx)
	if !last().Equal(second) || touches != 2 {
		t.Fatalf("an interval after the record: last use %v in %d entries, want %v in 2", last(), touches, second)
	}
	r.flush(ctx)
	if touches != 2 {
		t.Errorf("a flush with nothing new wrote an entry (%d)", touches)
	}

	// From another address the use is written at once.
	now = now.Add(10 * time.Millisecond)
	r.Use("a", "10.0.0.2:4000")
	r.flush(ctx)
	if !last().Equal(now) || rep.Store.Read().UserToken("a").GetLastUsedFrom() != "10.0.0.2" || touches != 3 {
		t.Errorf("a use from another address: last use %v from %q in %d entries, want %v from 10.0.0.2 in 3",
			last(), rep.Store.Read().UserToken("a").GetLastUsedFrom(), touches, now)
	}
}
