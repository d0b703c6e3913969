package shell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"corpus/drivers"
	"corpus/internal/procfs"
	"corpus/internal/testrun"
)

// hostExec runs commands on this host, as a driver runs them in a guest:
// on the terminal it is given (as its controlling terminal), or on pipes.
type hostExec struct{}

func (hostExec) Exec(ctx context.Context, _ string, req drivers.ExecRequest) (int, error) {
	cmd := exec.CommandContext(ctx, req.Argv[0], req.Argv[1:]...)
	if req.TTY != nil {
		// The guest's side opens the terminal (as a kubelet does).
		sz := <-req.TTY
		ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: sz.Rows, Cols: sz.Cols})
		if err != nil {
			return -1, err
		}
		var mu sync.Mutex // ptmx is closed only when nothing else uses it
		closed := false
		use := func(f func()) {
			mu.Lock()
			defer mu.Unlock()
			if !closed {
				f()
			}
		}
		defer func() {
			mu.Lock()
			closed = true
			ptmx.Close()
			mu.Unlock()
		}()
		go func() {
			for sz := range req.TTY {
				use(func() { pty.Setsize(ptmx, &pty.Winsize{Rows: sz.Rows, Cols: sz.Cols}) })
			}
		}()
		go func() {
			buf := make([]byte, 4096)
			for {
				n, err := req.Stdin.Read(buf)
				use(func() { ptmx.Write(buf[:n]) })
				if err != nil {
					return
				}
			}
		}()
		out := make(chan struct{})
		go func() { io.Copy(req.Stdout, ptmx); close(out) }() // ends at EIO once the command exits
		err = cmd.Wait()
		<-out
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), ctx.Err()
		}
		return 0, err
	}
	if req.Terminal != nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = req.Terminal, req.Terminal, req.Terminal
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	} else {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = req.Stdin, req.Stdout, req.Stderr
	}
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), ctx.Err()
	}
	return 0, err
}

// client feeds inputs and keeps what the session printed.
type client struct {
	in   chan Input
	mu   sync.Mutex
	out  strings.Builder
	gone chan struct{}
}

func newClient(inputs ...Input) *client {
	c := &client{in: make(chan Input, len(inputs)+1), gone: make(chan struct{})}
	for _, i := range inputs {
		c.in <- i
	}
	return c
}

func (c *client) Recv() (Input, error) {
	select {
	case i := <-c.in:
		return i, nil
	case <-c.gone:
		return Input{}, errors.New("client gone")
	}
}

func (c *client) Send(stdout, stderr []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out.Write(stdout)
	c.out.Write(stderr)
	return nil
}

func (c *client) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

func TestPipes(t *testing.T) {
	t.Parallel()
	m := New(Limits{})
	c := newClient(Input{Stdin: []byte("hello\n")}, Input{CloseStdin: true})
	code, err := m.Run(t.Context(), hostExec{}, Request{Argv: []string{"sh", "-c", "cat; echo err >&2; exit 5"}}, c)
	// stdout and stderr are pipes of their own: their order is not kept.
	if out := c.output(); err != nil || code != 5 || len(out) != len("hello\nerr\n") || !strings.Contains(out, "hello\n") || !strings.Contains(out, "err\n") {
		t.Errorf("Run = %d, %v, output %q", code, err, c.output())
	}
}

func TestTerminal(t *testing.T) {
	t.Parallel()
	m := New(Limits{})
	c := newClient(Input{Stdin: []byte("stty size; tty >/dev/null && echo on-a-tty; exit 7\n")})
	code, err := m.Run(t.Context(), hostExec{}, Request{Argv: []string{"sh"}, TTY: true, Rows: 33, Cols: 99}, c)
	if err != nil || code != 7 || !strings.Contains(c.output(), "33 99") || !strings.Contains(c.output(), "on-a-tty") {
		t.Errorf("Run = %d, %v, output %q", code, err, c.output())
	}
}

// TestTTYStream: a terminal on the guest's side follows the sizes the
// client sends.
func TestTTYStream(t *testing.T) {
	t.Parallel()
	m := New(Limits{})
	c := newClient(Input{Stdin: []byte("stty size\n")})
	var code int
	var err error
	done := make(chan struct{})
	go func() {
		code, err = m.Run(t.Context(), hostExec{}, Request{Argv: []string{"sh"}, TTY: true, TTYStream: true, Rows: 33, Cols: 99}, c)
		close(done)
	}()
	for deadline := time.Now().Add(testrun.D(5 * time.Second)); !strings.Contains(c.output(), "33 99") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	c.in <- Input{Rows: 44, Cols: 111}
	c.in <- Input{Stdin: []byte("sleep 0.2; stty size; exit 3\n")}
	<-done
	if err != nil || code != 3 || !strings.Contains(c.output(), "33 99") || !strings.Contains(c.output(), "44 111") {
		t.Errorf("Run = %d, %v, output %q", code, err, c.output())
	}
}

// TestLimits: an idle session ends and says why; a node at its cap of
// sessions refuses another; a client that goes ends its session.
func TestLimits(t *testing.T) {
	t.Parallel()
	m := New(Limits{Idle: 300 * time.Millisecond, Sessions: 1})
	c := newClient()
	start := time.Now()
	done := make(chan struct{})
	var code int
	var err error
	go func() {
		code, err = m.Run(t.Context(), hostExec{}, Request{Argv: []string{"sleep", "30"}}, c)
		close(done)
	}()
	for m.Active() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := m.Run(t.Context(), hostExec{}, Request{Argv: []string{"true"}}, newClient()); !errors.Is(err, ErrBusy) {
		t.Errorf("a second session at a cap of 1 = %v, want ErrBusy", err)
	}
	<-done
	if err != nil || code != 129 || !strings.Contains(c.output(), "idle") || time.Since(start) > testrun.D(20*time.Second) {
		t.Errorf("idle session: %d, %v, %q after %s", code, err, c.output(), time.Since(start))
	}

	c = newClient()
	done = make(chan struct{})
	go func() {
		_, err = m.Run(t.Context(), hostExec{}, Request{Argv: []string{"sh"}, TTY: true}, c)
		close(done)
	}()
	time.Sleep(100 * time.Millisecond)
	close(c.gone)
	select {
	case <-done:
	case <-time.After(testrun.D(10 * time.Second)):
		t.Fatal("a session whose client went did not end")
	}
}

// TestGoneClientClosesTerminal: a session whose client went returns and
// closes its terminal even while processes that ignore the hangup keep
// the terminal open and print nothing (the driver's exec ends those; the
// host here does not).
func TestGoneClientClosesTerminal(t *testing.T) {
	m := New(Limits{})
	c := newClient(Input{Stdin: []byte("echo sid=$$; trap '' HUP; sleep 3600 & sleep 3601\n")})
	done := make(chan error, 1)
	go func() {
		_, err := m.Run(t.Context(), hostExec{}, Request{Argv: []string{"sh"}, TTY: true}, c)
		done <- err
	}()
	var sid int
	testrun.Wait(t, 10*time.Second, "the session's commands", func() error {
		if m := regexp.MustCompile(`sid=(\d+)`).FindStringSubmatch(c.output()); m != nil {
			sid, _ = strconv.Atoi(m[1])
		}
		if sid == 0 || len(procfs.Session(sid)) < 3 {
			return fmt.Errorf("terminal: %q", c.output())
		}
		return nil
	})
	t.Cleanup(func() {
		for _, pid := range procfs.Session(sid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	close(c.gone)
	select {
	case <-done:
	case <-time.After(testrun.D(10 * time.Second)):
		t.Fatal("the session did not end after its client went")
	}
	if n := openTerminals(); n != 0 {
		t.Errorf("%d terminals still open after the session ended", n)
	}
}

// openTerminals counts this process's open pseudo-terminal main ends.
func openTerminals() int {
	fds, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, fd := range fds {
		if target, _ := os.Readlink("/proc/self/fd/" + fd.Name()); target == "/dev/ptmx" || target == "/dev/pts/ptmx" {
			n++
		}
	}
	return n
}
