//go:build linux && cgo

package lxc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"corpus/drivers"
	"corpus/internal/testrun"
)

// guestPs is what ps shows of the processes in guest name whose command
// line contains sub.
func guestPs(t *testing.T, d *Driver, name, sub string) []string {
	t.Helper()
	var out bytes.Buffer
	if _, err := d.Exec(t.Context(), name, drivers.ExecRequest{Argv: []string{"ps", "-o", "pid,pgid,args"}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for l := range strings.Lines(out.String()) {
		if strings.Contains(l, sub) {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}

// TestExecEndsSession: when an exec's ctx ends, nothing of its session
// stays in the guest: on a terminal, an interactive shell's background
// jobs (process groups of their own) and a process that ignores the
// hangup go with it; without one, what the command started in the
// background. A daemon (a session of its own) stays.
func TestExecEndsSession(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	spec := busybox("sessions")
	mustStart(t, d, spec)

	t.Run("terminal", func(t *testing.T) {
		ptmx, tty, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer ptmx.Close()
		out := newNotifyWriter()
		go io.Copy(out, ptmx)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := d.Exec(ctx, spec.Name, drivers.ExecRequest{Argv: []string{"sh", "-i"}, Terminal: tty})
			done <- err
		}()
		fmt.Fprintf(ptmx, "set -m\nsleep 4101 &\nsh -c 'trap \"\" HUP; exec sleep 4102' &\nsetsid sleep 4103 &\nsleep 4104\n")
		testrun.Wait(t, 30*time.Second, "the session's jobs running", func() error {
			if ps := guestPs(t, d, spec.Name, "sleep 410"); len(ps) < 4 {
				return fmt.Errorf("ps: %q; terminal: %q", ps, out.String())
			}
			return nil
		})
		if ps := guestPs(t, d, spec.Name, "sleep 410"); len(groups(ps)) < 3 {
			t.Fatalf("the jobs are not in process groups of their own (no job control): %q", ps)
		}
		start := time.Now()
		cancel() // the client went away
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Exec after cancel = %v, want context.Canceled", err)
			}
		case <-time.After(testrun.D(hangupGrace + 10*time.Second)):
			t.Fatal("Exec did not return after its ctx ended")
		}
		t.Logf("session ended %s after the cancel", time.Since(start).Round(time.Millisecond))
		tty.Close()
		if ps := guestPs(t, d, spec.Name, "sleep 410"); len(ps) != 1 || !strings.Contains(ps[0], "sleep 4103") {
			t.Errorf("after the session ended the guest runs %q, want only the daemon (sleep 4103)", ps)
		}
	})

	t.Run("pipes", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := d.Exec(ctx, spec.Name, drivers.ExecRequest{Argv: []string{"sh", "-c", "sleep 4201 & exec sleep 4202"}})
			done <- err
		}()
		testrun.Wait(t, 30*time.Second, "the command running", func() error {
			if ps := guestPs(t, d, spec.Name, "sleep 420"); len(ps) < 2 {
				return fmt.Errorf("ps: %q", ps)
			}
			return nil
		})
		cancel()
		select {
		case <-done:
		case <-time.After(testrun.D(10 * time.Second)):
			t.Fatal("Exec did not return after its ctx ended")
		}
		if ps := guestPs(t, d, spec.Name, "sleep 420"); len(ps) != 0 {
			t.Errorf("after the exec was cancelled the guest runs %q", ps)
		}
	})
}

// groups is the process groups of ps -o pid,pgid,args lines.
func groups(ps []string) map[string]bool {
	g := map[string]bool{}
	for _, l := range ps {
		if f := strings.Fields(l); len(f) > 1 {
			g[f[1]] = true
		}
	}
	return g
}
