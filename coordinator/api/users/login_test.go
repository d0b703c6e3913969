package users

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLoginLimiter(t *testing.T) {
	t.Parallel()
	l := newLoginLimiter()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a, from := limit{"user:a", maxUserFailures}, limit{"addr:x", maxAddrFailures}
	for i := range maxUserFailures {
		if w := l.take(t0.Add(time.Duration(i)*time.Second), a, from); w != 0 {
			t.Fatalf("take after %d attempts = %s, want 0", i, w)
		}
	}
	now := t0.Add(10 * time.Second)
	if w := l.take(now, a, from); w != loginWindow-10*time.Second {
		t.Errorf("take after %d attempts = %s, want %s (until the first leaves the window)", maxUserFailures, w, loginWindow-10*time.Second)
	}
	if n := len(l.failures[from.key]); n != maxUserFailures {
		t.Errorf("a refused take counted the address: %d attempts, want %d", n, maxUserFailures)
	}
	if w := l.take(now, limit{"user:b", maxUserFailures}, from); w != 0 {
		t.Errorf("take of another user = %s, want 0", w)
	}
	if w := l.take(t0.Add(loginWindow), a); w != 0 {
		t.Errorf("take once the first attempt left the window = %s, want 0", w)
	}
	// A success gives its attempt back.
	l.giveBack(from.key, now)
	if n := len(l.failures[from.key]); n != maxUserFailures {
		t.Errorf("after giving one back the address has %d attempts, want %d", n, maxUserFailures)
	}
	l.reset(a.key)
	if w := l.take(now, limit{a.key, 1}); w != 0 {
		t.Errorf("take after reset = %s, want 0", w)
	}
	// A flood of addresses keeps the map bounded.
	for i := range maxLimiterKeys + 100 {
		l.take(now, limit{fmt.Sprintf("addr:%d", i), maxAddrFailures})
	}
	if n := len(l.failures); n > maxLimiterKeys {
		t.Errorf("limiter holds %d keys, want at most %d", n, maxLimiterKeys)
	}
	// Attempts past the window are forgotten, their keys too.
	l.take(now.Add(2*loginWindow), limit{"addr:y", 1})
	if n := len(l.failures); n != 1 {
		t.Errorf("limiter holds %d keys a window later, want 1", n)
	}
}

// TestLoginLimiterParallel: attempts made at once cannot all slip under
// the limit.
func TestLoginLimiterParallel(t *testing.T) {
	t.Parallel()
	l := newLoginLimiter()
	now := time.Now()
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			if l.take(now, limit{"user:a", maxUserFailures}) == 0 {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != maxUserFailures {
		t.Errorf("%d of 100 parallel attempts allowed, want %d", n, maxUserFailures)
	}
}
