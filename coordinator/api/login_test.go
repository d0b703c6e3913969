package api

import (
	"fmt"
	"testing"
	"time"
)

func TestLoginLimiter(t *testing.T) {
	t.Parallel()
	l := newLoginLimiter()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range maxUserFailures {
		if w := l.wait("user:a", maxUserFailures, t0); w != 0 {
			t.Fatalf("wait after %d failures = %s, want 0", i, w)
		}
		l.fail("user:a", t0.Add(time.Duration(i)*time.Second))
	}
	now := t0.Add(10 * time.Second)
	if w := l.wait("user:a", maxUserFailures, now); w != loginWindow-10*time.Second {
		t.Errorf("wait after %d failures = %s, want %s (until the first leaves the window)", maxUserFailures, w, loginWindow-10*time.Second)
	}
	if w := l.wait("user:b", maxUserFailures, now); w != 0 {
		t.Errorf("wait of another key = %s, want 0", w)
	}
	if w := l.wait("user:a", maxUserFailures, t0.Add(loginWindow)); w != 0 {
		t.Errorf("wait once the first failure left the window = %s, want 0", w)
	}
	l.reset("user:a")
	if w := l.wait("user:a", 1, now); w != 0 {
		t.Errorf("wait after reset = %s, want 0", w)
	}
	// A flood of addresses keeps the map bounded.
	for i := range maxLimiterKeys + 100 {
		l.fail(fmt.Sprintf("addr:%d", i), now)
	}
	if n := len(l.failures); n > maxLimiterKeys {
		t.Errorf("limiter holds %d keys, want at most %d", n, maxLimiterKeys)
	}
	// Failures past the window are forgotten, their keys too.
	l.fail("addr:x", now.Add(2*loginWindow))
	if n := len(l.failures); n != 1 {
		t.Errorf("limiter holds %d keys a window later, want 1", n)
	}
}
