package procfs

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"corpus/internal/testrun"
)

func TestSelf(t *testing.T) {
	pid := os.Getpid()
	f := Stat(pid)
	if len(f) < 20 || f[0] != "R" && f[0] != "S" {
		t.Fatalf("Stat(self) = %q, want a running or sleeping process's fields", f)
	}
	// The session as this process's namespace sees it: 0 where the
	// session's leader lives outside it (as under a container's init).
	if sid, err := strconv.Atoi(f[3]); err != nil || sid != getsid() {
		t.Errorf("session %q, want %d", f[3], getsid())
	}
	if Start(pid) == "" || !Running(pid) {
		t.Errorf("Start(self) = %q, Running(self) = %t", Start(pid), Running(pid))
	}
	// Spin until the kernel says this process used 150 ms more CPU (on a
	// loaded machine that takes longer than 150 ms), then compare.
	before, kBefore := CPU(pid), processCPU(t)
	for deadline := time.Now().Add(testrun.D(30 * time.Second)); processCPU(t)-kBefore < 150*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatal("could not spin 150 ms of CPU")
		}
	}
	if got := CPU(pid) - before; got < 100*time.Millisecond {
		t.Errorf("150 ms of CPU (getrusage) counted as %s", got)
	}
	if rss := RSS(pid); rss < 1<<20 {
		t.Errorf("RSS(self) = %d bytes", rss)
	}
}

// TestZombieAndGone: a child that exited and is not reaped is not
// running; once reaped, nothing is known of it.
func TestZombieAndGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(testrun.D(5 * time.Second)); Running(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("an exited child still counts as running")
		}
	}
	if f := Stat(pid); len(f) == 0 || f[0] != "Z" {
		t.Fatalf("unreaped child's state = %q, want Z", f)
	}
	cmd.Wait()
	if Stat(pid) != nil || Start(pid) != "" || CPU(pid) != 0 || RSS(pid) != 0 {
		t.Fatal("a reaped child still has /proc entries")
	}
}

func getsid() int {
	sid, _ := unix.Getsid(0)
	return sid
}

// processCPU is the CPU time this process used, as getrusage says.
func processCPU(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestSession: a session lists its leader and what it started, not what
// made a session of its own, and nothing once its processes ended.
func TestSession(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & setsid sleep 31 & echo $!; exec sleep 32")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sid := cmd.Process.Pid
	var own int
	fmt.Fscan(out, &own)
	defer func() {
		for _, pid := range append(Session(sid), own) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		cmd.Wait()
	}()
	for deadline := time.Now().Add(testrun.D(5 * time.Second)); len(Session(sid)) != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Session(%d) = %v, want sh (sleep 32 now) and sleep 30", sid, Session(sid))
		}
	}
	if got := Session(sid); !slices.Contains(got, sid) || slices.Contains(got, own) || own == 0 {
		t.Errorf("Session(%d) = %v: want its leader, not %d (a session of its own)", sid, got, own)
	}
	for _, pid := range Session(sid) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(testrun.D(5 * time.Second)); len(Session(sid)) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Session(%d) = %v after SIGKILL", sid, Session(sid))
		}
	}
}

// TestDescendants: what a process started, and what that started, not
// the process itself.
func TestDescendants(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sh -c 'sleep 33 & wait' & exec sleep 34")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	root := cmd.Process.Pid
	defer func() {
		for _, pid := range Descendants(root) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		cmd.Process.Kill()
		cmd.Wait()
	}()
	for deadline := time.Now().Add(testrun.D(5 * time.Second)); len(Descendants(root)) != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Descendants(%d) = %v, want sh and its sleep", root, Descendants(root))
		}
	}
	d := Descendants(root)
	if slices.Contains(d, root) || Stat(d[1])[1] != strconv.Itoa(d[0]) {
		t.Errorf("Descendants(%d) = %v: want the child, then its child", root, d)
	}
}
