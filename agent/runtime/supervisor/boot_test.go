package supervisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// bootCommand runs BootScript as a guest's main command would, with the
// supervisor at bin and the marker at marker.
// The channel passes on how it ended, once.
func bootCommand(t *testing.T, bin, marker string) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", BootScript, "corpus-boot", bin, marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done, exited := make(chan error, 1), make(chan struct{})
	go func() { done <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	return cmd, done
}

// TestBootScript: the main command marks the guest, waits for the
// supervisor to be installed, then becomes it (same PID) as a daemon.
func TestBootScript(t *testing.T) {
	dir := t.TempDir()
	bin, marker, out := filepath.Join(dir, "lib", "sup"), filepath.Join(dir, "run", "boot"), filepath.Join(dir, "out")
	cmd, done := bootCommand(t, bin, marker)
	waitFor(t, "the boot marker", func() bool { _, err := os.Stat(marker); return err == nil })
	select {
	case err := <-done:
		t.Fatalf("the boot command ended before the supervisor was there: %v", err)
	case <-time.After(1500 * time.Millisecond):
	}
	// Installed as the agent does: written aside, then moved in place.
	os.MkdirAll(filepath.Dir(bin), 0o755)
	script := "#!/bin/sh\necho \"$$ $*\" > " + out + "\n"
	if err := testrun.WriteExecutable(bin+".new", []byte(script)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("boot command: %v", err)
		}
	case <-time.After(testrun.D(10 * time.Second)):
		t.Fatal("the boot command did not run the supervisor")
	}
	b, _ := os.ReadFile(out)
	if want := strconv.Itoa(cmd.Process.Pid) + " daemon\n"; string(b) != want {
		t.Errorf("the supervisor ran as %q, want %q (the main command's own PID, as a daemon)", b, want)
	}
}

// TestBootScriptStops: asked to stop before the supervisor is there (a
// pod deleted at once), the main command ends cleanly and at once.
func TestBootScriptStops(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "boot")
	cmd, done := bootCommand(t, filepath.Join(dir, "sup"), marker)
	// The script marks the guest before it sets its trap: asked to stop
	// in between, sh ends by the signal. It is waiting (its trap set)
	// once its child is the sleep of its loop (not the mkdir before the
	// trap, which CI once caught).
	waitFor(t, "the boot script waiting for the supervisor", func() bool { return hasChild(cmd.Process.Pid, "sleep") })
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(testrun.D(5 * time.Second)):
		t.Fatal("the boot command ignored SIGTERM")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("stopping took %s", d)
	}
}

// hasChild reports whether process pid has a child named comm, from
// /proc/*/stat.
func hasChild(pid int, comm string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and ')'.
		s := string(b)
		lp, rp := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if lp < 0 || rp < lp {
			continue
		}
		f := strings.Fields(s[rp+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) && s[lp+1:rp] == comm {
			return true
		}
	}
	return false
}

// TestDetachWaitsForBoot: in a guest whose main command starts the
// supervisor, start waits for that one and never starts its own.
func TestDetachWaitsForBoot(t *testing.T) {
	s, dir := newTest(t)
	sock, lock, marker := filepath.Join(dir, "s.sock"), filepath.Join(dir, "s.lock"), filepath.Join(dir, "boot")
	os.WriteFile(marker, nil, 0o644)
	// Nothing to start: a Detach that tried would fail on the binary.
	self := filepath.Join(dir, "no-such-binary")
	if err := Detach(self, sock, marker, filepath.Join(dir, "d.log"), 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "main command") {
		t.Errorf("Detach with a marker and no supervisor = %v, want it to say the main command's did not answer", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		time.Sleep(200 * time.Millisecond) // the main command's, a little later
		done <- s.Serve(ctx, sock, lock)
	}()
	if err := Detach(self, sock, marker, filepath.Join(dir, "d.log"), 10*time.Second); err != nil {
		t.Errorf("Detach with the main command's supervisor coming up = %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
