package statelock

import (
	"bufio"
	"errors"
	"fmt"
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

// The test binary runs again as a helper process when this is set: it
// takes the lock of the folder named and then does what helperMode says.
const helperEnv = "STATELOCK_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode, os.Getenv("STATELOCK_TEST_DIR")))
	}
	os.Exit(m.Run())
}

// helper is the second process. Modes:
//
//	hold   take the lock, print "locked", wait until stdin closes
//	spawn  as hold, after starting `sleep 60` (printed as "child PID")
//	share  as spawn, the child sharing the lock file's descriptor, as a
//	       fork of the holder that never execs does (liblxc's attach)
//	try    take the lock once, print the error, exit 1 if refused
func helper(mode, dir string) int {
	l, err := Acquire(dir)
	if err != nil {
		fmt.Println(err)
		if inUse := (*InUseError)(nil); errors.As(err, &inUse) {
			return 1
		}
		return 2
	}
	if mode == "try" {
		fmt.Println("locked")
		return 0
	}
	if mode == "spawn" || mode == "share" {
		c := exec.Command("sleep", "60")
		if mode == "share" {
			c.ExtraFiles = []*os.File{l.f}
		}
		if err := c.Start(); err != nil {
			fmt.Println(err)
			return 2
		}
		fmt.Println("child", c.Process.Pid)
	}
	fmt.Println("locked")
	bufio.NewReader(os.Stdin).ReadString('\n')
	l.Release()
	return 0
}

// helperProc is a running helper; done closes when it has exited.
type helperProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startHelper starts the test binary as a helper and waits until it
// holds the lock; it returns the helper and the PID of its own child
// (spawn mode, else 0). The helper is killed at the test's end.
func startHelper(t *testing.T, mode, dir string) (h *helperProc, child int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "STATELOCK_TEST_DIR="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	h = &helperProc{cmd: cmd, done: done}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		<-done
	})
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		line := lines.Text()
		if pid, ok := strings.CutPrefix(line, "child "); ok {
			child, _ = strconv.Atoi(pid)
			t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
			continue
		}
		if line != "locked" {
			t.Fatalf("helper %s said %q, want \"locked\"", mode, line)
		}
		return h, child
	}
	t.Fatalf("helper %s ended before it held the lock", mode)
	return nil, 0
}

// TestSecondProcessIsRefused: while one process holds a folder, another
// is refused at once with the folder and the holder's PID.
func TestSecondProcessIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	holder, _ := startHelper(t, "hold", dir)

	start := time.Now()
	l, err := Acquire(dir)
	if err == nil {
		l.Release()
		t.Fatal("Acquire while another process holds the folder = nil error, want ErrInUse")
	}
	if took := time.Since(start); took > testrun.D(2*time.Second) {
		t.Errorf("Acquire took %v to refuse, want it at once", took)
	}
	var inUse *InUseError
	if !errors.As(err, &inUse) {
		t.Fatalf("Acquire = %v, want an *InUseError", err)
	}
	if inUse.PID != holder.cmd.Process.Pid || inUse.Dir != dir {
		t.Errorf("refusal names folder %s PID %d, want %s PID %d", inUse.Dir, inUse.PID, dir, holder.cmd.Process.Pid)
	}
	for _, want := range []string{dir, fmt.Sprintf("process %d", holder.cmd.Process.Pid)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not name %q", err, want)
		}
	}
}

// TestHolderIsNamedToAnotherProcess: the other way round, a process
// that finds the folder held by this one names this PID.
func TestHolderIsNamedToAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=try", "STATELOCK_TEST_DIR="+dir)
	out, err := cmd.Output()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("second process exit = %d (%v), output %q; want 1, refused", code, err, out)
	}
	want := fmt.Sprintf("state folder %s is in use by process %d", dir, os.Getpid())
	if !strings.Contains(string(out), want) {
		t.Errorf("second process said %q, want it to contain %q", out, want)
	}
}

// TestKilledHolderLeavesNoLock: SIGKILL leaves the lock file behind with
// a dead PID in it, but no lock, also when the killed process had
// started a program that still runs.
func TestKilledHolderLeavesNoLock(t *testing.T) {
	for _, mode := range []string{"hold", "spawn"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			holder, child := startHelper(t, mode, dir)
			if err := holder.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-holder.done
			if mode == "spawn" {
				if err := syscall.Kill(child, 0); err != nil {
					t.Fatalf("the helper's child %d is gone (%v); the case needs it alive", child, err)
				}
			}
			l, err := Acquire(dir)
			if err != nil {
				t.Fatalf("Acquire after the holder was killed = %v, want the lock", err)
			}
			defer l.Release()
			b, _ := os.ReadFile(filepath.Join(dir, FileName))
			if got, want := strings.TrimSpace(string(b)), strconv.Itoa(os.Getpid()); got != want {
				t.Errorf("lock file holds %q, want this PID %s", got, want)
			}
		})
	}
}

// TestReleaseAndReacquire: a released folder can be taken again; while
// held, a second Acquire in the same process is refused too (flock
// locks belong to open files, not processes).
func TestReleaseAndReacquire(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	if l2, err := Acquire(dir); !errors.As(err, new(*InUseError)) {
		l2.Release()
		t.Fatalf("second Acquire in the same process = %v, want an *InUseError", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Errorf("second Release = %v, want nil", err)
	}
	l, err = Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release = %v", err)
	}
	l.Release()
}

// TestChildSharingTheFileDoesNotHold: a holder killed while a process
// that shares its lock file's descriptor lives on (a fork that never
// execs: liblxc attaches a command in a guest so, and it lives as long
// as the command) leaves the folder free at once. With flock(2) such a
// child kept it locked, and an agent killed during a deploy step could
// not start again until the step ended.
func TestChildSharingTheFileDoesNotHold(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	holder, child := startHelper(t, "share", dir)
	if child == 0 {
		t.Fatal("the helper started no child")
	}
	holder.cmd.Process.Kill()
	<-holder.done
	if syscall.Kill(child, 0) != nil {
		t.Fatal("the child sharing the descriptor is gone: nothing tested")
	}
	l, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after the holder was killed, its child sharing the file alive = %v, want the lock", err)
	}
	l.Release()
}

// TestSameProcessIsRefused: a second Acquire of a folder this process
// holds is refused (a record lock does not refuse its own process), and
// the first lock holds on: another process is still refused.
func TestSameProcessIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	var inUse *InUseError
	if l2, err := Acquire(dir); !errors.As(err, &inUse) || inUse.PID != os.Getpid() {
		l2.Release()
		t.Fatalf("a second Acquire in the holding process = %v, want an *InUseError naming PID %d", err, os.Getpid())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=try", "STATELOCK_TEST_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("another process took the folder after the refused second Acquire: %s", out)
	}
}
