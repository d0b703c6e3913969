package supervisor

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"corpus/internal/testrun"
)

func newTest(t *testing.T) (*Supervisor, string) {
	t.Helper()
	dir := t.TempDir()
	s := &Supervisor{StateFile: filepath.Join(dir, "state", "state.json"), LogDir: filepath.Join(dir, "log"), Version: "test"}
	t.Cleanup(s.StopAll)
	return s, dir
}

func gen(dir, id string, procs ...Process) Generation {
	return Generation{Project: "site", ID: id, Release: id, Dir: dir, Processes: procs,
		Grace: Duration(2 * time.Second), MinUptime: Duration(300 * time.Millisecond)}
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(testrun.D(10 * time.Second))
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func only(t *testing.T, st []Status, name string) Status {
	t.Helper()
	var found []Status
	for _, s := range st {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d processes named %s in %+v", len(found), name, st)
	}
	return found[0]
}

func TestStartRestartStop(t *testing.T) {
	s, dir := newTest(t)
	env := filepath.Join(dir, "env.json")
	os.WriteFile(env, []byte(`{"GREETING":"hello world","SECRET":"s3cr3t"}`), 0o600)
	g := gen(dir, "r1",
		Process{Name: "web", Command: `echo "port=$PORT greeting=$GREETING process=$CORPUS_PROCESS"; exec sleep 60`, Port: 8123},
		Process{Name: "worker", Command: "exec sleep 60"})
	g.EnvFile = env
	res := s.Handle(Request{Op: OpStart, Generation: &g})
	if res.Error != "" {
		t.Fatalf("start: %s", res.Error)
	}
	web := only(t, res.Processes, "web")
	if web.State != StateRunning || web.PID == 0 || web.Port != 8123 || web.Release != "r1" {
		t.Fatalf("web = %+v", web)
	}
	// The process saw its environment; the log has its output.
	log := filepath.Join(dir, "log", "site", "web.log")
	waitFor(t, "web's output in its log", func() bool {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "port=8123 greeting=hello world process=web")
	})
	// Killed from outside, it comes back, counted.
	syscall.Kill(web.PID, syscall.SIGKILL)
	var again Status
	waitFor(t, "web restarted", func() bool {
		again = only(t, s.status("site"), "web")
		return again.State == StateRunning && again.PID != web.PID && again.PID != 0
	})
	if again.Restarts != 1 || !strings.Contains(again.LastExit, "killed") {
		t.Fatalf("after a kill: %+v", again)
	}
	if d := again.StartedAt.Sub(web.StartedAt); d > 5*time.Second {
		t.Fatalf("restarted %s after the first start", d)
	}
	// The state file knows the generation and the process groups (the
	// restarted one's written just after it shows running).
	var b []byte
	waitFor(t, "the state file with the generation and both process groups", func() bool {
		b, _ = os.ReadFile(s.StateFile)
		var st savedState
		return json.Unmarshal(b, &st) == nil && len(st.Generations) == 1 && len(st.Groups) == 2
	})
	if fi, _ := os.Stat(s.StateFile); fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v", fi.Mode())
	}
	// Stop: SIGTERM reaches the group, the processes are gone.
	pid := again.PID
	res = s.Handle(Request{Op: OpStop, Project: "site", ID: "r1"})
	if res.Error != "" || len(res.Processes) != 0 {
		t.Fatalf("stop: %+v", res)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("process %d still runs after stop", pid)
	}
}

func TestStartFailsOnQuickExit(t *testing.T) {
	s, dir := newTest(t)
	g := gen(dir, "r1",
		Process{Name: "web", Command: "exec sleep 60"},
		Process{Name: "bad", Command: "echo cannot find app.py >&2; exit 3"})
	res := s.Handle(Request{Op: OpStart, Generation: &g})
	if !strings.Contains(res.Error, "process bad exited") || !strings.Contains(res.Error, "exit status 3") {
		t.Fatalf("start of a crashing process: %+v", res)
	}
	if len(res.Output) == 0 || !strings.Contains(strings.Join(res.Output, "\n"), "cannot find app.py") {
		t.Fatalf("the failure does not show the process's output: %q", res.Output)
	}
	if st := s.status("site"); len(st) != 0 {
		t.Fatalf("a failed start left processes: %+v", st)
	}
	// Bad specs are refused.
	for _, bad := range []Generation{
		{Project: "site", ID: "x", Dir: "relative", Processes: []Process{{Name: "a", Command: "true"}}},
		{Project: "site", ID: "x", Dir: dir},
		{Project: "site", ID: "x", Dir: dir, Processes: []Process{{Name: "a", Command: " "}}},
		{Project: "site", ID: "x", Dir: dir, Processes: []Process{{Name: "a", Command: "true"}, {Name: "a", Command: "true"}}},
		{Project: "site", ID: "x", Dir: dir, Processes: []Process{{Name: "a", Command: "true", StopSignal: 65}}},
	} {
		if res := s.Handle(Request{Op: OpStart, Generation: &bad}); res.Error == "" {
			t.Errorf("spec %+v was accepted", bad)
		}
	}
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	s, dir := newTest(t)
	g := gen(dir, "r1", Process{Name: "stubborn", Command: `trap "" TERM; echo ready; while :; do sleep 0.1; done`})
	g.Grace = Duration(300 * time.Millisecond)
	if res := s.Handle(Request{Op: OpStart, Generation: &g}); res.Error != "" {
		t.Fatal(res.Error)
	}
	start := time.Now()
	s.Handle(Request{Op: OpStop, Project: "site"})
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("stopping a process that ignores SIGTERM took %s, want the grace then SIGKILL", d)
	}
}

// TestStopSignal: a process with a stop signal of its own (an image's)
// is stopped by that signal, which it traps, not by SIGTERM; the log
// says which.
func TestStopSignal(t *testing.T) {
	s, dir := newTest(t)
	mark := filepath.Join(dir, "stopped")
	g := gen(dir, "r1", Process{Name: "web", Command: "an image's entrypoint", StopSignal: int(syscall.SIGUSR1),
		Argv: []string{"/bin/sh", "-c", `trap 'echo USR1 > "$0"; exit 0' USR1; trap 'echo TERM > "$0"; exit 0' TERM; while :; do sleep 0.1; done`, mark}})
	if res := s.Handle(Request{Op: OpStart, Generation: &g}); res.Error != "" {
		t.Fatal(res.Error)
	}
	if res := s.Handle(Request{Op: OpStop, Project: "site"}); res.Error != "" {
		t.Fatal(res.Error)
	}
	if b, err := os.ReadFile(mark); strings.TrimSpace(string(b)) != "USR1" {
		t.Errorf("the process trapped %q (%v), want USR1", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "log", "site", "web.log")); !strings.Contains(string(b), "stopping (SIGUSR1; SIGKILL after 2s)") {
		t.Errorf("the log does not say the stop signal:\n%s", b)
	}
}

func TestTwoGenerationsSideBySide(t *testing.T) {
	s, dir := newTest(t)
	g1 := gen(dir, "r1", Process{Name: "web", Command: "exec sleep 60", Port: 9001})
	g2 := gen(dir, "r2", Process{Name: "web", Command: "exec sleep 60", Port: 9002})
	for _, g := range []Generation{g1, g2} {
		if res := s.Handle(Request{Op: OpStart, Generation: &g}); res.Error != "" {
			t.Fatal(res.Error)
		}
	}
	if st := s.status("site"); len(st) != 2 {
		t.Fatalf("status = %+v", st)
	}
	// The same start again is a no-op; another spec under the id is not.
	if res := s.Handle(Request{Op: OpStart, Generation: &g2}); res.Error != "" {
		t.Fatalf("repeating a start: %s", res.Error)
	}
	g2b := g2
	g2b.Processes = []Process{{Name: "web", Command: "exec sleep 61", Port: 9002}}
	if res := s.Handle(Request{Op: OpStart, Generation: &g2b}); res.Error == "" {
		t.Fatal("another spec under a running generation's id was accepted")
	}
	s.Handle(Request{Op: OpStop, Project: "site", ID: "r1"})
	st := s.status("site")
	if len(st) != 1 || st[0].Generation != "r2" || st[0].Port != 9002 {
		t.Fatalf("after stopping r1: %+v", st)
	}
}

func TestRestoreEndsLeftoversAndRestarts(t *testing.T) {
	dir := t.TempDir()
	stateFile := filepath.Join(dir, "state.json")
	s1 := &Supervisor{StateFile: stateFile, LogDir: filepath.Join(dir, "log")}
	// s1 lives on in this test process (a real one would be gone): its
	// restarts are ended at the end.
	t.Cleanup(s1.StopAll)
	g := gen(dir, "r1", Process{Name: "web", Command: "exec sleep 60"})
	res := s1.Handle(Request{Op: OpStart, Generation: &g})
	if res.Error != "" {
		t.Fatal(res.Error)
	}
	old := res.Processes[0].PID
	// The supervisor dies without stopping its processes (kill -9): a new
	// one ends the orphan and runs the generation again.
	s2 := &Supervisor{StateFile: stateFile, LogDir: filepath.Join(dir, "log")}
	t.Cleanup(s2.StopAll)
	t.Cleanup(func() { syscall.Kill(-old, syscall.SIGKILL) })
	if err := s2.Restore(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the orphan ended", func() bool {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(old) + "/stat")
		// A zombie of s1's (this test process) counts as ended.
		return len(b) == 0 || strings.Contains(string(b), ") Z ")
	})
	waitFor(t, "web running again", func() bool {
		st := s2.status("site")
		return len(st) == 1 && st[0].State == StateRunning && st[0].PID != old
	})
}

func TestServeAndCall(t *testing.T) {
	s, dir := newTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	sock, lock := filepath.Join(dir, "s.sock"), filepath.Join(dir, "s.lock")
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, sock, lock) }()
	waitFor(t, "the socket", func() bool {
		_, err := Call(context.Background(), sock, Request{Op: OpPing})
		return err == nil
	})
	// A second supervisor on the same lock refuses to run.
	s2 := &Supervisor{StateFile: filepath.Join(dir, "other.json"), LogDir: dir}
	if err := s2.Serve(context.Background(), filepath.Join(dir, "s2.sock"), lock); err == nil || !strings.Contains(err.Error(), "another corpus-supervisor") {
		t.Fatalf("a second supervisor: %v", err)
	}
	g := gen(dir, "r1", Process{Name: "web", Command: "exec sleep 60"})
	res, err := Call(context.Background(), sock, Request{Op: OpStart, Generation: &g})
	if err != nil || res.Error != "" || res.Version != "test" {
		t.Fatalf("start over the socket: %+v, %v", res, err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := s.status(""); len(st) != 0 && st[0].State != StateStopped {
		t.Fatalf("processes after the supervisor stopped: %+v", st)
	}
}

func TestFreePort(t *testing.T) {
	s, _ := newTest(t)
	busy, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	taken := busy.Addr().(*net.TCPAddr).Port
	free := testrun.FreePort(t)
	if res := s.Handle(Request{Op: OpFreePort, Ports: []int{taken, free}}); res.Error != "" || res.Port != free {
		t.Fatalf("free_port of a taken and a free port = %+v, want %d", res, free)
	}
	if res := s.Handle(Request{Op: OpFreePort, Ports: []int{taken}}); res.Error == "" {
		t.Fatalf("free_port of a taken port alone = %+v, want an error", res)
	}
}

// TestStartInRoot: a generation with a root (a release made from an OCI
// image) runs its processes' argv as they are, chrooted there, in a
// folder of the root, with the environment file read from outside it.
func TestStartInRoot(t *testing.T) {
	s, dir := newTest(t)
	root := testrun.BusyboxRoot(t, dir, "www")
	env := filepath.Join(dir, "env.json")
	os.WriteFile(env, []byte(`{"GREETING":"from the config"}`), 0o600)
	g := gen("/www", "r1", Process{Name: "web", Command: "busybox sh (image)", Port: 8123,
		Argv: []string{"/bin/busybox", "sh", "-c", `echo "$(busybox pwd) $(busybox ls /) $PORT $GREETING" > out; exec busybox sleep 60`}})
	g.Root, g.EnvFile = root, env
	if res := s.Handle(Request{Op: OpStart, Generation: &g}); res.Error != "" {
		t.Fatalf("start: %s", res.Error)
	}
	out := filepath.Join(root, "www", "out")
	var b []byte
	waitFor(t, "the process's output in the root", func() bool { b, _ = os.ReadFile(out); return len(b) > 0 })
	if got, want := string(b), "/www bin\ndev\nproc\ntmp\nwww 8123 from the config\n"; got != want {
		t.Errorf("the process in its root said %q, want %q (chrooted with /dev, /proc and /tmp, in its folder, with PORT and the config)", got, want)
	}
}

// TestReadyEndsMinUptime: a start waits out MinUptime only for the
// processes nobody vouched for; an exit ends the wait at once.
func TestReadyEndsMinUptime(t *testing.T) {
	s, dir := newTest(t)
	long := Duration(10 * time.Minute) // the test ends long before unless ready works
	g := gen(dir, "r1", Process{Name: "web", Command: "exec sleep 600"}, Process{Name: "worker", Command: "exec sleep 600"})
	g.MinUptime = long
	answered := make(chan Response, 1)
	go func() { answered <- s.Handle(Request{Op: OpStart, Generation: &g}) }()
	waitFor(t, "both processes running", func() bool {
		st := s.status("site")
		return len(st) == 2 && st[0].State == StateRunning && st[1].State == StateRunning
	})
	if res := s.Handle(Request{Op: OpReady, Project: "site", ID: "r1", Names: []string{"web"}}); res.Error != "" {
		t.Fatal(res.Error)
	}
	select {
	case res := <-answered:
		t.Fatalf("the start answered with worker not ready nor up its minimum: %+v", res)
	case <-time.After(3 * settleTick):
	}
	if res := s.Handle(Request{Op: OpReady, Project: "site", ID: "r1", Names: []string{"worker"}}); res.Error != "" {
		t.Fatal(res.Error)
	}
	select {
	case res := <-answered:
		if res.Error != "" || len(res.Processes) != 2 {
			t.Fatalf("start: %+v", res)
		}
	case <-time.After(testrun.D(10 * time.Second)):
		t.Fatal("the start still waits with every process ready")
	}
	if res := s.Handle(Request{Op: OpReady, Project: "site", ID: "r9"}); !strings.Contains(res.Error, "no generation r9") {
		t.Fatalf("ready for a generation that does not run: %+v", res)
	}

	// A process that exits fails the start when it exits, not at the end
	// of the minimum.
	bad := gen(dir, "r2", Process{Name: "web", Command: "exec sleep 600"}, Process{Name: "bad", Command: "sleep 0.1; exit 4"})
	bad.MinUptime = long
	go func() { answered <- s.Handle(Request{Op: OpStart, Generation: &bad}) }()
	select {
	case res := <-answered:
		if !strings.Contains(res.Error, "process bad exited") || !strings.Contains(res.Error, "exit status 4") {
			t.Fatalf("start of a process that exits: %+v", res)
		}
	case <-time.After(testrun.D(10 * time.Second)):
		t.Fatal("the start waits out its minimum uptime after a process exited")
	}
	if st := s.status("site"); len(st) != 2 {
		t.Fatalf("the failed start touched the running generation: %+v", st)
	}
}
