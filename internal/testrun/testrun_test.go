package testrun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseScale(t *testing.T) {
	for in, want := range map[string]float64{"": 1, "x": 1, "0.5": 1, "1": 1, "2.5": 2.5, " 3 ": 3, "100": 20} {
		if got := parseScale(in); got != want {
			t.Errorf("parseScale(%q) = %v, want %v", in, got, want)
		}
	}
}

// fakeClock moves only when a wait sleeps, so the tests of waiting
// depend on no machine's speed.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time        { return c.now }
func (c *fakeClock) Sleep(d time.Duration) { c.now = c.now.Add(d) }

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_800_000_000, 0)} }

// TestWaitProgress: a subject whose state keeps changing is waited for
// past the deadline; one that stops changing fails a deadline after its
// last change; a subject that flaps between states it was seen in makes
// no progress.
func TestWaitProgress(t *testing.T) {
	const d = time.Second
	nolog := func(string, ...any) {}

	c := newFakeClock()
	start := c.now
	calls := 0
	err := wait(c, d, "moving", func() error {
		calls++
		if c.now.Sub(start) > 4*d {
			return nil
		}
		return fmt.Errorf("step %d", calls) // new every call: progress
	}, nolog)
	if err != nil {
		t.Errorf("a subject that keeps moving: %v", err)
	}

	c = newFakeClock()
	start = c.now
	err = wait(c, d, "stuck", func() error {
		if moved := c.now.Sub(start); moved < 2*d {
			return fmt.Errorf("moving %s", moved)
		}
		return errors.New("stuck")
	}, nolog)
	if err == nil || !strings.Contains(err.Error(), "stuck: not reached") {
		t.Errorf("a subject that stopped moving = %v, want not reached", err)
	}
	if took := c.now.Sub(start); took < 3*d || took > 3*d+d/5 {
		t.Errorf("a subject that stopped after 2d failed after %s, want d after that", took)
	}

	c = newFakeClock()
	start = c.now
	flip := false
	err = wait(c, d, "flapping", func() error {
		flip = !flip
		return fmt.Errorf("state %v", flip)
	}, nolog)
	if err == nil {
		t.Fatal("a flapping subject reached its goal")
	}
	if took := c.now.Sub(start); took > d+d/2 {
		t.Errorf("a flapping subject was waited for %s, want about d", took)
	}
}

// TestWaitBound: progress or not, a wait ends within patience times d.
func TestWaitBound(t *testing.T) {
	const d = time.Second
	c := newFakeClock()
	start := c.now
	n := 0
	err := wait(c, d, "endless", func() error { n++; return fmt.Errorf("new %d", n) }, func(string, ...any) {})
	if err == nil {
		t.Fatal("an endless wait ended well")
	}
	if took := c.now.Sub(start); took < patience*d || took > patience*d+d/5 {
		t.Errorf("an endless wait took %s, want about %s", took, patience*d)
	}
}

// TestWaitSaysWhatItWaitsFor: a long wait logs what it waits for and the
// last answer, every 30 s.
func TestWaitSaysWhatItWaitsFor(t *testing.T) {
	c := newFakeClock()
	start := c.now
	var lines []string
	wait(c, 2*time.Minute, "guest web running", func() error {
		if c.now.Sub(start) > 100*time.Second {
			return nil
		}
		return errors.New("creating: building image")
	}, func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) })
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "waiting for guest web running (30s): creating: building image") {
		t.Errorf("lines logged over 100 s = %q, want three, each what it waits for", lines)
	}
}

func TestMade(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger")
	t.Setenv(ledgerEnv, ledger)
	Made("netns", "ce1-2-ctl")
	Made("dir", "/tmp/x")
	b, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "netns ce1-2-ctl\ndir /tmp/x\n"; got != want {
		t.Errorf("ledger = %q, want %q", got, want)
	}
	t.Setenv(ledgerEnv, "")
	Made("netns", "unrecorded") // outside the runner: nothing, no error
}

// sleepLog is a fakeClock that keeps the sleeps it was asked for.
type sleepLog struct {
	fakeClock
	sleeps []time.Duration
}

func (c *sleepLog) Sleep(d time.Duration) { c.sleeps = append(c.sleeps, d); c.fakeClock.Sleep(d) }

// TestWaitPolls: a wait first asks every poll, less and less often
// (up to maxPoll) while nothing changes, at poll's pace again after a
// change; a short deadline is asked ten times over.
func TestWaitPolls(t *testing.T) {
	nolog := func(string, ...any) {}
	c := &sleepLog{fakeClock: *newFakeClock()}
	calls := 0
	wait(c, time.Minute, "slow", func() error {
		calls++
		switch {
		case calls == 40:
			return errors.New("changed")
		case calls < 60:
			return fmt.Errorf("state %d", min(calls/40, 1))
		}
		return nil
	}, nolog)
	if c.sleeps[0] != poll || c.sleeps[1] <= poll {
		t.Errorf("first sleeps %v, want %v and then longer", c.sleeps[:2], poll)
	}
	if got := c.sleeps[38]; got != maxPoll {
		t.Errorf("sleep after 38 unchanged answers = %v, want %v", got, maxPoll)
	}
	if got := c.sleeps[39]; got != poll {
		t.Errorf("sleep after a change = %v, want %v", got, poll)
	}
	c = &sleepLog{fakeClock: *newFakeClock()}
	wait(c, time.Second, "short", func() error { return errors.New("no") }, nolog)
	if n := len(c.sleeps); n < 10 || slices.Max(c.sleeps) > 100*time.Millisecond {
		t.Errorf("a 1 s wait slept %d times, at most %v; want every 100 ms", n, slices.Max(c.sleeps))
	}
}

// TestFreePort: ports come from below the ephemeral range, are free for
// TCP and UDP, and are never handed out twice by one process.
func TestFreePort(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p := FreePort(t)
		if p < portLow || p >= portHigh {
			t.Fatalf("port %d outside [%d, %d)", p, portLow, portHigh)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if !free(p) {
			t.Fatalf("port %d is not free", p)
		}
	}
}
