package keylock

import (
	"testing"
	"time"

	"corpus/internal/testrun"
)

func TestLock(t *testing.T) {
	var m Map
	unlockA := m.Lock("a")
	// Another key is free while a is held.
	m.Lock("b")()
	got := make(chan struct{})
	go func() {
		defer m.Lock("a")()
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("a second Lock(a) did not wait for the first")
	case <-time.After(50 * time.Millisecond):
	}
	unlockA()
	select {
	case <-got:
	case <-time.After(testrun.D(5 * time.Second)):
		t.Fatal("Lock(a) still waits after the unlock")
	}
}
