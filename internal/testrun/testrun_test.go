package testrun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// TestWaitProgress: a subject whose state keeps changing is waited for
// past the deadline; one that stops changing fails a deadline after its
// last change; a subject that flaps between states it was seen in
// makes no progress.
func TestWaitProgress(t *testing.T) {
	const d = 100 * time.Millisecond
	nolog := func(string, ...any) {}

	start := time.Now()
	calls := 0
	err := wait(d, "moving", func() error {
		calls++
		if time.Since(start) > 4*d {
			return nil
		}
		return fmt.Errorf("step %d", calls) // new every call: progress
	}, nolog)
	if err != nil {
		t.Errorf("a subject that keeps moving: %v", err)
	}

	start = time.Now()
	err = wait(d, "stuck", func() error {
		if time.Since(start) < 2*d {
			return fmt.Errorf("moving %d", time.Since(start)/poll)
		}
		return errors.New("stuck")
	}, nolog)
	if err == nil || !strings.Contains(err.Error(), "stuck: not reached") {
		t.Errorf("a subject that stopped moving = %v, want not reached", err)
	}
	if took := time.Since(start); took < 2*d+d-poll {
		t.Errorf("a subject that stopped after 2d failed after %s, before d without progress", took)
	}

	start = time.Now()
	flip := false
	err = wait(d, "flapping", func() error {
		flip = !flip
		return fmt.Errorf("state %v", flip)
	}, nolog)
	if err == nil {
		t.Fatal("a flapping subject reached its goal")
	}
	if took := time.Since(start); took > 4*d {
		t.Errorf("a flapping subject was waited for %s, want about d", took)
	}
}

// TestWaitBound: progress or not, a wait ends within patience times d.
func TestWaitBound(t *testing.T) {
	const d = 20 * time.Millisecond
	start := time.Now()
	n := 0
	err := wait(d, "endless", func() error { n++; return fmt.Errorf("new %d", n) }, func(string, ...any) {})
	if err == nil {
		t.Fatal("an endless wait ended well")
	}
	if took := time.Since(start); took < patience*d || took > patience*d+time.Second {
		t.Errorf("an endless wait took %s, want about %s", took, patience*d)
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
