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

// TestDemote: a push's end demoted to background work keeps the
// environment (a sync is turned away) and makes the next push wait for
// it rather than be refused.
func TestDemote(t *testing.T) {
	var l Locks
	if _, ok := l.Lock(t.Context(), "p/dev", "a push"); !ok {
		t.Fatal("a free environment refused a push")
	}
	l.Demote("p/dev", "old processes retiring")
	if l.TryBackground("p/dev", "a sync") {
		t.Error("a sync took an environment a demoted push holds")
	}
	// A push whose caller gives up at once: refused after waiting (the
	// holder named as the background work), not refused by a push.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if holder, ok := l.Lock(ctx, "p/dev", "the next push"); ok || holder != "old processes retiring" {
		t.Errorf("the next push = %q, %v; want it to wait for the retiring processes", holder, ok)
	}
	l.Unlock("p/dev")
	if _, ok := l.Lock(t.Context(), "p/dev", "the next push"); !ok {
		t.Error("the next push was refused once the demoted one let go")
	}
	l.Unlock("p/dev")
}
