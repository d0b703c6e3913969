// Package testrun is what a test learns from the runner that started it
// (test/run): how much slower than a quiet machine this one is (Scale),
// how to wait for a condition rather than a clock (Wait), and where to
// record what it makes outside its temporary folders (Made), so that the
// runner can sweep it away when a test binary dies before its cleanups
// run.
//
// The runner sets CORPUS_TEST_SCALE from the machine (its cores and load,
// cold caches) and CORPUS_TEST_LEDGER to a file of its own per test
// process. Outside the runner both are unset: the scale is 1 and nothing
// is recorded.
package testrun

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// scaleEnv is the variable the runner sets the scale with.
const scaleEnv = "CORPUS_TEST_SCALE"

var scale = parseScale(os.Getenv(scaleEnv))

func parseScale(s string) float64 {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f < 1 {
		return 1
	}
	return min(f, 20)
}

// Scale is the factor every fixed deadline of a test is multiplied by:
// 1 on a quiet machine, more where the runner found fewer cores, a loaded
// machine or cold caches. It is never below 1.
func Scale() float64 { return scale }

// D is d multiplied by Scale: the form every fixed deadline of a test
// takes.
func D(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }

// TB is the part of testing.TB that Wait uses.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// progressNote is how often a wait says what it is waiting for.
const progressNote = 30 * time.Second

// Wait calls f until it returns nil, every poll, and fails t when it did
// not within d. f's error says where its subject stands ("guest web is
// creating: building image debian/bookworm (2m10s)"); a message Wait has
// not seen before during this wait is progress and gives f d more from
// then, so a subject that is visibly moving (an image building, a deploy
// streaming) is waited for, while one that is stuck fails after d. Every
// wait ends within patience times d from its start, progress or not.
// d (and so the bound) is scaled by Scale. Every 30 s Wait logs what it
// waits for and f's last answer, so a long wait is never silent.
func Wait(t TB, d time.Duration, what string, f func() error) {
	t.Helper()
	if err := wait(realClock{}, D(d), what, f, t.Logf); err != nil {
		t.Fatalf("%v", err)
	}
}

// clock is the time a wait keeps (a fake one in its own tests).
type clock interface {
	Now() time.Time
	Sleep(time.Duration)
}

type realClock struct{}

func (realClock) Now() time.Time        { return time.Now() }
func (realClock) Sleep(d time.Duration) { time.Sleep(d) }

// patience is how many times its deadline a wait may last while its
// subject makes progress.
const patience = 10

// poll is how long a wait first sleeps between calls, and maxPoll the
// longest it comes to while its subject stays as it was (each a tenth of
// its deadline when that is shorter). Most calls are CLI runs and API
// reads: a guest that takes two minutes to boot is asked 150 times, not
// 600, and a change is seen again at poll's pace.
const (
	poll    = 200 * time.Millisecond
	maxPoll = 800 * time.Millisecond
)

// seenCap bounds the messages a wait remembers.
const seenCap = 4096

// wait is Wait with d already scaled, on clock c.
func wait(c clock, d time.Duration, what string, f func() error, logf func(string, ...any)) error {
	start := c.Now()
	bound := start.Add(patience * d)
	deadline := start.Add(d)
	seen := map[string]bool{}
	lastNote := start
	first, longest := min(poll, d/10), min(maxPoll, d/10)
	sleep := first
	for {
		err := f()
		if err == nil {
			return nil
		}
		now := c.Now()
		if msg := err.Error(); !seen[msg] && len(seen) < seenCap {
			if len(seen) > 0 {
				deadline = now.Add(d) // progress: a state not seen before
				sleep = first
			}
			seen[msg] = true
		} else {
			sleep = min(sleep+sleep/4, longest)
		}
		if now.After(deadline) || now.After(bound) {
			return fmt.Errorf("%s: not reached within %s (%s without progress): %v",
				what, now.Sub(start).Round(time.Second), d, err)
		}
		if now.Sub(lastNote) >= progressNote {
			logf("waiting for %s (%s): %v", what, now.Sub(start).Round(time.Second), err)
			lastNote = now
		}
		c.Sleep(sleep)
	}
}

// Until is Wait for a condition that has nothing to say while it does
// not hold.
func Until(t TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	Wait(t, d, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

var errNotYet = notYet{}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

// ledgerEnv names the file the runner reads what tests made from.
const ledgerEnv = "CORPUS_TEST_LEDGER"

var ledgerMu sync.Mutex

// Made records that the test made something the runner should remove if
// the test binary dies before its own cleanup does: kind is "netns"
// (a network namespace's name), "dir" (a folder whose mounts, loop
// devices, containers and processes go with it) or "pid" (a process
// that outlives its parent by design). Outside the runner it does
// nothing. A record that cannot be written is reported to stderr: the
// sweep is a safety net, not the test's own cleanup.
func Made(kind, what string) {
	path := os.Getenv(ledgerEnv)
	if path == "" {
		return
	}
	ledgerMu.Lock()
	defer ledgerMu.Unlock()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err == nil {
		_, err = fmt.Fprintf(f, "%s %s\n", kind, what)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testrun: recording %s %s: %v\n", kind, what, err)
	}
}

// WriteExecutable writes an executable file that the test will run, with
// no fork of this process in between: a child forked while the file is
// open for writing holds the descriptor until it execs, and running the
// file in that window fails with "text file busy" (ETXTBSY). Tests run
// in parallel and start processes all the time, so a plain
// os.WriteFile followed by exec fails now and then on a busy machine.
// syscall.ForkLock is the lock os/exec holds while it forks.
func WriteExecutable(path string, data []byte) error {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	return os.WriteFile(path, data, 0o755)
}

// BusyboxRoot makes a root folder for chroot, dir/rootfs, with the
// folders named and the host's static busybox as /bin/busybox; it skips
// the test without root (chroot) or that busybox (busybox-static).
func BusyboxRoot(t interface {
	TB
	Skip(args ...any)
	Skipf(format string, args ...any)
	Fatal(args ...any)
}, dir string, folders ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (chroot)")
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skipf("skipping: needs the host's static busybox (busybox-static): %v", err)
	}
	root := filepath.Join(dir, "rootfs")
	for _, d := range append(folders, "bin") {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteExecutable(filepath.Join(root, "bin", "busybox"), bb); err != nil {
		t.Fatal(err)
	}
	return root
}
