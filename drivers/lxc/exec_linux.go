//go:build linux && cgo

package lxc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	golxc "github.com/lxc/go-lxc"
	"golang.org/x/sys/unix"

	"corpus/drivers"
	"corpus/internal/procfs"
)

// execWaitDelay bounds how long Exec keeps copying output after the command
// exits: a background process that inherited stdout would otherwise keep
// the pipe open, and Exec from returning, for as long as it lives.
const execWaitDelay = 2 * time.Second

// Exec runs req.Argv in the running guest through liblxc's attach: the
// command joins the guest's namespaces and cgroup and runs with the
// guest's capabilities, its lxc.environment, req.Env and PATH, in req.Dir
// ("/" when empty; liblxc keeps "/" when the directory does not exist).
// Output is copied to req.Stdout and req.Stderr while the command runs.
//
// The result is the command's exit status, or 128+n when signal n killed
// it. A guest that is not running gives an error wrapping
// drivers.ErrNotRunning. When ctx ends, what the command runs ends and
// Exec returns ctx's error. On a terminal, liblxc made the command the
// leader of a session of its own: that session, every process group of
// it, is hung up (SIGHUP and SIGCONT, as a terminal that goes away does),
// gets hangupGrace to exit, and what is left is killed; what made a
// session of its own (a daemon) stays. Without one, the command and every
// process below it are killed. Copying of Stdin stops when the command
// exits; a Read from req.Stdin already in progress then may still complete
// after Exec returns.
func (d *Driver) Exec(ctx context.Context, name string, req drivers.ExecRequest) (int, error) {
	code, err := d.exec(ctx, name, req)
	if err != nil {
		return -1, fmt.Errorf("exec in container %s: %w", name, err)
	}
	return code, nil
}

func (d *Driver) exec(ctx context.Context, name string, req drivers.ExecRequest) (int, error) {
	if len(req.Argv) == 0 {
		return 0, errors.New("empty command")
	}
	env := make([]string, 0, len(req.Env))
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		if err := validEnv(k, req.Env[k]); err != nil {
			return 0, err
		}
		env = append(env, k+"="+req.Env[k])
	}
	c, _, err := d.openGuest(name)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	if !c.Running() {
		return 0, drivers.ErrNotRunning
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}

	s, err := openStreams(req)
	if err != nil {
		return 0, err
	}
	defer s.close()
	dir := req.Dir
	if dir == "" {
		dir = "/"
	}
	uid, gid := -1, -1
	if req.UID > 0 {
		uid = req.UID
	}
	if req.GID > 0 {
		gid = req.GID
	}
	opts := golxc.AttachOptions{
		Namespaces: -1,
		Arch:       -1,
		UID:        uid,
		GID:        gid,
		Cwd:        dir,
		ClearEnv:   true,
		Env:        env,
		StdinFd:    s.stdin.Fd(),
		StdoutFd:   s.stdout.Fd(),
		StderrFd:   s.stderr.Fd(),
	}
	pid, err := c.RunCommandNoWait(req.Argv, opts)
	if err != nil {
		if !c.Running() {
			return 0, drivers.ErrNotRunning
		}
		return 0, err
	}
	// liblxc creates the command with CLONE_PARENT: it is our child, so
	// Wait reaps it, and the pidfd behind Process guards Kill against
	// pid reuse.
	proc, err := os.FindProcess(pid)
	if err != nil {
		return 0, err
	}
	s.start(req.Stdin)

	// Told of the exit without reaping it: until Wait below, the pid (and
	// the session's id, which is the pid) names no other process.
	exited := make(chan struct{})
	go func() {
		var info unix.Siginfo
		for unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
		}
		close(exited)
	}()
	select {
	case <-exited:
	case <-ctx.Done():
		endCommand(proc, pid, req.Terminal != nil)
		<-exited
		_, _ = proc.Wait()
		s.finish()
		return 0, fmt.Errorf("command killed: %w", ctx.Err())
	}
	ps, err := proc.Wait()
	s.finish()
	if err != nil {
		return 0, fmt.Errorf("waiting for command: %w", err)
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}

// hangupGrace is how long a terminal's session has to exit once hung up
// before what is left of it is killed.
const hangupGrace = 2 * time.Second

// endCommand ends what the command (proc, pid: not reaped yet) runs: its
// session, when it leads one (on a terminal), with a hangup first; else
// the command and every process below it.
func endCommand(proc *os.Process, pid int, hangup bool) {
	if f := procfs.Stat(pid); len(f) > 3 && f[3] == strconv.Itoa(pid) {
		endSession(pid, hangup)
		return
	}
	endTree(proc, pid)
}

// endSession ends session sid, every process group of it; what made a
// session of its own stays.
func endSession(sid int, hangup bool) {
	if hangup {
		for _, p := range procfs.Session(sid) {
			unix.Kill(p, unix.SIGHUP)
			unix.Kill(p, unix.SIGCONT)
		}
		for deadline := time.Now().Add(hangupGrace); len(procfs.Session(sid)) > 0 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	// What forks meanwhile is found on the next pass.
	for range 100 {
		left := procfs.Session(sid)
		if len(left) == 0 {
			return
		}
		for _, p := range left {
			unix.Kill(p, unix.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// endTree kills the command and every process below it: stopped first,
// from the top, so none forks or leaves its parent meanwhile, then killed.
func endTree(proc *os.Process, pid int) {
	_ = proc.Signal(syscall.SIGSTOP)
	stopped := map[int]bool{}
	for range 100 {
		fresh := false
		for _, p := range procfs.Descendants(pid) {
			if !stopped[p] {
				unix.Kill(p, unix.SIGSTOP)
				stopped[p], fresh = true, true
			}
		}
		if !fresh {
			break
		}
	}
	_ = proc.Kill()
	for p := range stopped {
		unix.Kill(p, unix.SIGKILL)
	}
}

// streams are the command's standard files and the copying around them.
type streams struct {
	stdin, stdout, stderr *os.File // the command's ends
	child                 []*os.File
	stdinW                *os.File   // our end of the stdin pipe, nil without Stdin
	outputs               []*os.File // our ends of output pipes
	writers               []io.Writer
	copying               sync.WaitGroup
}

// openStreams opens pipes for the request's streams, /dev/null for absent ones.
func openStreams(req drivers.ExecRequest) (s *streams, err error) {
	if t := req.Terminal; t != nil {
		return &streams{stdin: t, stdout: t, stderr: t}, nil // the caller's to close
	}
	s = &streams{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if req.Stdin == nil {
		if s.stdin, err = os.Open(os.DevNull); err != nil {
			return nil, err
		}
	} else if s.stdin, s.stdinW, err = os.Pipe(); err != nil {
		return nil, err
	}
	s.child = append(s.child, s.stdin)
	if s.stdout, err = s.output(req.Stdout); err != nil {
		return nil, err
	}
	if sameWriter(req.Stdout, req.Stderr) {
		s.stderr = s.stdout
	} else if s.stderr, err = s.output(req.Stderr); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *streams) output(w io.Writer) (*os.File, error) {
	if w == nil {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		s.child = append(s.child, f)
		return f, nil
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.child = append(s.child, pw)
	s.outputs = append(s.outputs, r)
	s.writers = append(s.writers, w)
	return pw, nil
}

// sameWriter reports whether a and b are the same non-nil writer, which then
// shares one pipe so it is never written concurrently (as os/exec does).
func sameWriter(a, b io.Writer) (same bool) {
	if a == nil || b == nil {
		return false
	}
	defer func() {
		if recover() != nil { // uncomparable dynamic types
			same = false
		}
	}()
	return a == b
}

// start closes our copies of the command's ends and starts copying.
func (s *streams) start(stdin io.Reader) {
	for _, f := range s.child {
		f.Close()
	}
	s.child = nil
	if s.stdinW != nil {
		go func(w *os.File) {
			_, _ = io.Copy(w, stdin)
			w.Close()
		}(s.stdinW)
	}
	for i, r := range s.outputs {
		s.copying.Add(1)
		go func(w io.Writer) {
			defer s.copying.Done()
			if _, err := io.Copy(w, r); err != nil {
				// Keep draining so the command never blocks on a full pipe.
				_, _ = io.Copy(io.Discard, r)
			}
		}(s.writers[i])
	}
}

// finish stops feeding stdin and waits, at most execWaitDelay, for output
// to reach end of file before cutting it off.
func (s *streams) finish() {
	if s.stdinW != nil {
		s.stdinW.Close()
	}
	done := make(chan struct{})
	go func() {
		s.copying.Wait()
		close(done)
	}()
	t := time.NewTimer(execWaitDelay)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		for _, r := range s.outputs {
			r.Close()
		}
		<-done
	}
}

// close releases every file still open.
func (s *streams) close() {
	for _, f := range s.child {
		f.Close()
	}
	if s.stdinW != nil {
		s.stdinW.Close()
	}
	for _, r := range s.outputs {
		r.Close()
	}
}
