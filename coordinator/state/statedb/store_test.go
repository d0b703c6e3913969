package statedb

import (
	"context"
	"testing"
	"time"
)

// TestWaitApplied: a waiter wakes when the index it waits for is
// applied, not before, and gives up when its context ends.
func TestWaitApplied(t *testing.T) {
	s := NewStore()
	s.SetApplied(3)
	if !s.WaitApplied(context.Background(), 3) {
		t.Fatal("WaitApplied(3) at 3 = false")
	}

	woke := make(chan bool, 1)
	go func() { woke <- s.WaitApplied(context.Background(), 5) }()
	s.SetApplied(4)
	select {
	case <-woke:
		t.Fatal("WaitApplied(5) returned at 4")
	case <-time.After(20 * time.Millisecond):
	}
	s.SetApplied(5)
	if !<-woke {
		t.Fatal("WaitApplied(5) at 5 = false")
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { woke <- s.WaitApplied(ctx, 9) }()
	cancel()
	if <-woke {
		t.Fatal("WaitApplied(9) at 5 after cancel = true")
	}
}
