package envlock

import (
	"context"
	"testing"
	"time"
)

// TestEnvLocks: a user's call waits for background work and is refused
// by another user's call; background work is refused by either.
func TestEnvLocks(t *testing.T) {
	var l Locks
	if holder, ok := l.Lock(t.Context(), "p/dev", "a push"); !ok {
		t.Fatalf("a free environment refused a push (%s)", holder)
	}
	if holder, ok := l.Lock(t.Context(), "p/dev", "a deploy"); ok || holder != "a push" {
		t.Errorf("a deploy during a push = %q, %v; want refused by the push", holder, ok)
	}
	if l.TryBackground("p/dev", "a sync") {
		t.Error("a sync took an environment a push holds")
	}
	l.Unlock("p/dev")

	if !l.TryBackground("p/dev", "a sync") {
		t.Fatal("a sync could not take a free environment")
	}
	got := make(chan bool)
	go func() {
		_, ok := l.Lock(t.Context(), "p/dev", "a deploy")
		got <- ok
	}()
	select {
	case ok := <-got:
		t.Fatalf("a deploy did not wait for the sync (ok %v)", ok)
	case <-time.After(100 * time.Millisecond):
	}
	l.Unlock("p/dev")
	if !<-got {
		t.Fatal("the deploy was refused once the sync let go")
	}
	if l.TryBackground("p/dev", "a sync") {
		t.Error("a sync took an environment a deploy holds")
	}
	l.Unlock("p/dev")

	l.TryBackground("p/dev", "a sync")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if holder, ok := l.Lock(ctx, "p/dev", "a deploy"); ok || holder != "a sync" {
		t.Errorf("a deploy whose caller went = %q, %v; want refused, the sync named", holder, ok)
	}
}

// TestWait: background work that waits for the environment (a
// deploy's old processes retiring) gets it once a push lets go, and
// gives up when its context ends.
func TestWait(t *testing.T) {
	var l Locks
	if _, ok := l.Lock(t.Context(), "p/dev", "a push"); !ok {
		t.Fatal("a free environment refused a push")
	}
	got := make(chan bool)
	go func() { got <- l.Wait(t.Context(), "p/dev", "old processes retiring") }()
	select {
	case ok := <-got:
		t.Fatalf("Wait did not wait for the push (ok %v)", ok)
	case <-time.After(100 * time.Millisecond):
	}
	l.Unlock("p/dev")
	if !<-got {
		t.Fatal("Wait gave up once the push let go")
	}
	// It holds the environment as background work: a sync is turned
	// away, a push waits for it.
	if l.TryBackground("p/dev", "a sync") {
		t.Error("a sync took an environment the retiring holds")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if holder, ok := l.Lock(ctx, "p/dev", "the next push"); ok || holder != "old processes retiring" {
		t.Errorf("the next push = %q, %v; want it to wait for the retiring processes", holder, ok)
	}
	if l.Wait(ctx, "p/dev", "more retiring") {
		t.Error("Wait with its context ended took a held environment")
	}
	l.Unlock("p/dev")
	before := l.Calls("p/dev")
	if _, ok := l.Lock(t.Context(), "p/dev", "the next push"); !ok {
		t.Error("the next push was refused once the retiring let go")
	}
	l.Unlock("p/dev")
	l.TryBackground("p/dev", "a sync")
	l.Unlock("p/dev")
	if got := l.Calls("p/dev"); got != before+1 {
		t.Errorf("Calls after a push and a sync = %d, want %d (users' calls only)", got, before+1)
	}
}
