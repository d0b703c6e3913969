// Package shell runs interactive sessions in guests for the agent: a
// command whose input comes from the client as it types, whose output
// goes back as it comes, on a pseudo-terminal of the node when asked (so
// editors, Ctrl-C, job control and window sizes work), bounded by an
// idle limit, a total limit and a cap on concurrent sessions.
//
// The terminal is opened on the node and given to the command through
// the driver's exec (drivers.ExecRequest.Terminal); corpus-supervisor tty
// in the guest makes it the command's controlling terminal. When the
// client goes away the session ends: the exec is cancelled, which ends
// the command's session in the guest (hung up, then what is left killed:
// background jobs too), and the terminal is closed, also while something
// still holds it open.
//
// Sessions prepares a session in a guest of the node (the environment of
// a project's processes, the terminal wrapper) and serves the agent's
// Exec and Shell calls; the SSH endpoint (agent/sshd) asks it too.
package shell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"corpus/drivers"
)

// Execer runs a command in a guest (a driver).
type Execer interface {
	Exec(ctx context.Context, guest string, req drivers.ExecRequest) (int, error)
}

// Request is one session.
type Request struct {
	Guest string
	Argv  []string
	Env   map[string]string
	Dir   string
	// TTY runs the command on a pseudo-terminal of Rows × Cols; Wrap
	// turns argv into the command that makes it the controlling
	// terminal (corpus-supervisor tty).
	TTY        bool
	Rows, Cols uint16
	Wrap       func(argv []string) []string
	// TTYStream asks the driver for the terminal on the guest's side
	// (drivers.ExecRequest.TTY, a Kubernetes exec) instead of opening
	// one on the node.
	TTYStream bool
}

// Input is what the client sends after the request: bytes typed, a new
// window size, or the end of its input.
type Input struct {
	Stdin      []byte
	Rows, Cols uint16 // a resize when non-zero
	CloseStdin bool
}

// ClampSize turns a client's terminal dimension into one a terminal
// takes (4096 at most).
func ClampSize(n uint32) uint16 { return uint16(min(n, 4096)) }

// Client is the two ends of a session's stream.
type Client interface {
	// Recv returns the client's next input; an error ends the session.
	Recv() (Input, error)
	// Send passes output on.
	Send(stdout, stderr []byte) error
}

// Limits bound sessions.
type Limits struct {
	// Idle ends a session without input or output for that long.
	Idle time.Duration
	// Total ends a session that long after it started.
	Total time.Duration
	// Sessions is how many may run at once on the node.
	Sessions int
}

// Manager runs sessions within limits.
type Manager struct {
	limits Limits
	slots  chan struct{}
}

// ErrBusy is returned when the node runs as many sessions as it may.
var ErrBusy = errors.New("this node runs as many shell sessions as it allows")

// New returns a Manager; zero limits get defaults (30 min idle, 12 h in
// all, 100 sessions).
func New(l Limits) *Manager {
	if l.Idle <= 0 {
		l.Idle = 30 * time.Minute
	}
	if l.Total <= 0 {
		l.Total = 12 * time.Hour
	}
	if l.Sessions <= 0 {
		l.Sessions = 100
	}
	return &Manager{limits: l, slots: make(chan struct{}, l.Sessions)}
}

// Active is how many sessions run now.
func (m *Manager) Active() int { return len(m.slots) }

// Run runs a session until the command exits (its exit status), the
// client goes, a limit passes or ctx ends.
func (m *Manager) Run(ctx context.Context, x Execer, req Request, c Client) (int, error) {
	select {
	case m.slots <- struct{}{}:
	default:
		return -1, ErrBusy
	}
	defer func() { <-m.slots }()
	ctx, cancel := context.WithTimeout(ctx, m.limits.Total)
	defer cancel()
	s := &session{c: c, cancel: cancel}
	s.touch()
	go s.watchIdle(ctx, m.limits.Idle)
	run := s.runPipes
	switch {
	case req.TTY && req.TTYStream:
		run = s.runTTYStream
	case req.TTY:
		run = s.runTTY
	}
	code, err := run(ctx, x, req)
	if _, limited := s.why.Load().(string); limited {
		// Ended as a hung-up terminal ends it.
		return 128 + 1, nil
	}
	return code, err
}

type session struct {
	c      Client
	cancel context.CancelFunc
	last   atomic.Int64 // unix ns of the last input or output
	sendMu sync.Mutex
	why    atomic.Value // string: why the session was ended by a limit
}

func (s *session) touch() { s.last.Store(time.Now().UnixNano()) }

func (s *session) send(stdout, stderr []byte) error {
	s.touch()
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.c.Send(stdout, stderr)
}

func (s *session) watchIdle(ctx context.Context, idle time.Duration) {
	t := time.NewTicker(min(idle/4, 10*time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				s.why.CompareAndSwap(nil, "the session reached its time limit")
			}
			return
		case <-t.C:
			if time.Since(time.Unix(0, s.last.Load())) > idle {
				s.why.CompareAndSwap(nil, fmt.Sprintf("the session was idle for %s", idle))
				s.cancel()
				return
			}
		}
	}
}

// ended says why a limit ended the session, to the client.
func (s *session) ended() {
	if why, ok := s.why.Load().(string); ok {
		s.send(nil, []byte("\r\n[corpus] "+why+"; it ended\r\n"))
	}
}

// input passes the client's input on until it ends: to stdin, whose end
// closeIn marks (nil on a terminal, whose end is a key the user types),
// and window sizes to resize. A receive error other than io.EOF (the
// client went) ends the session.
func (s *session) input(ctx context.Context, stdin io.Writer, closeIn func(), resize func(rows, cols uint16)) {
	end := func() {
		if closeIn != nil {
			closeIn()
			closeIn = nil
		}
	}
	for {
		in, err := s.c.Recv()
		if errors.Is(err, io.EOF) {
			end() // the client sends no more; a gone client ends ctx instead
			return
		}
		if err != nil {
			s.cancel()
			return
		}
		s.touch()
		if in.Rows > 0 && in.Cols > 0 && resize != nil {
			resize(in.Rows, in.Cols)
		}
		if len(in.Stdin) > 0 && stdin != nil {
			if _, err := stdin.Write(in.Stdin); err != nil {
				stdin = nil
			}
		}
		if in.CloseStdin {
			end()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func (s *session) runTTY(ctx context.Context, x Execer, req Request) (int, error) {
	ptmx, tty, err := openTerminal()
	if err != nil {
		return -1, fmt.Errorf("opening a terminal: %w", err)
	}
	defer ptmx.Close()
	resize := func(rows, cols uint16) { setSize(ptmx, rows, cols) }
	if req.Rows > 0 && req.Cols > 0 {
		resize(req.Rows, req.Cols)
	}
	argv := req.Argv
	if req.Wrap != nil {
		argv = req.Wrap(argv)
	}
	output := make(chan struct{})
	go func() {
		defer close(output)
		buf := make([]byte, 32<<10)
		for {
			n, err := ptmx.Read(buf)
			if n > 0 {
				if s.send(append([]byte(nil), buf[:n]...), nil) != nil {
					s.cancel()
				}
			}
			if err != nil {
				return // EIO once the command and its children let go of it
			}
		}
	}()
	go s.input(ctx, ptmx, nil, resize)
	code, err := x.Exec(ctx, req.Guest, drivers.ExecRequest{Argv: argv, Env: req.Env, Dir: req.Dir, Terminal: tty})
	tty.Close()
	// What the command printed last is still in the terminal; a
	// background process holding it would keep it open, so not for long.
	select {
	case <-output:
	case <-time.After(2 * time.Second):
	}
	ptmx.Close() // hangs up whatever still holds the terminal
	<-output
	s.ended()
	if ctx.Err() != nil && err != nil {
		return -1, ctx.Err()
	}
	return code, err
}

func (s *session) runPipes(ctx context.Context, x Execer, req Request) (int, error) {
	pr, pw := io.Pipe()
	defer pr.Close()
	go s.input(ctx, pw, func() { pw.Close() }, nil)
	go func() {
		<-ctx.Done() // a limit or a gone client: no more input
		pw.CloseWithError(io.EOF)
	}()
	code, err := x.Exec(ctx, req.Guest, drivers.ExecRequest{
		Argv: req.Argv, Env: req.Env, Dir: req.Dir, Stdin: pr,
		Stdout: writerFunc(func(p []byte) error { return s.send(append([]byte(nil), p...), nil) }),
		Stderr: writerFunc(func(p []byte) error { return s.send(nil, append([]byte(nil), p...)) }),
	})
	s.ended()
	if ctx.Err() != nil && err != nil {
		return -1, ctx.Err()
	}
	return code, err
}

// runTTYStream runs the command on a terminal the driver gets on the
// guest's side; input and output pass as streams, sizes on a channel.
func (s *session) runTTYStream(ctx context.Context, x Execer, req Request) (int, error) {
	pr, pw := io.Pipe()
	defer pr.Close()
	sizes := make(chan drivers.TerminalSize, 8)
	sizes <- drivers.TerminalSize{Rows: max(req.Rows, 1), Cols: max(req.Cols, 1)}
	var sizeMu sync.Mutex // sizes is closed only when no resize sends
	closed := false
	resize := func(rows, cols uint16) {
		sizeMu.Lock()
		defer sizeMu.Unlock()
		if closed {
			return
		}
		select {
		case sizes <- drivers.TerminalSize{Rows: rows, Cols: cols}:
		default: // a burst: the next change will do
		}
	}
	defer func() {
		sizeMu.Lock()
		closed = true
		close(sizes)
		sizeMu.Unlock()
	}()
	go s.input(ctx, pw, nil, resize)
	go func() {
		<-ctx.Done()
		pw.CloseWithError(io.EOF)
	}()
	code, err := x.Exec(ctx, req.Guest, drivers.ExecRequest{
		Argv: req.Argv, Env: req.Env, Dir: req.Dir, Stdin: pr, TTY: sizes,
		Stdout: writerFunc(func(p []byte) error { return s.send(append([]byte(nil), p...), nil) }),
	})
	s.ended()
	if ctx.Err() != nil && err != nil {
		return -1, ctx.Err()
	}
	return code, err
}

// openTerminal opens a pseudo-terminal whose main end is read through
// the runtime's poller, so that closing it ends a Read in progress.
// pty.Open leaves it in blocking mode: a Close then waits for the Read,
// which waits for output that never comes while a process of the
// session keeps the terminal open and quiet.
func openTerminal() (ptmx, tty *os.File, err error) {
	m, tty, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	defer m.Close()
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		if err = unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		tty.Close()
		return nil, nil, err
	}
	return os.NewFile(uintptr(fd), m.Name()), tty, nil
}

// setSize sets the terminal's window size without putting ptmx in
// blocking mode (as its Fd method would).
func setSize(ptmx *os.File, rows, cols uint16) {
	c, err := ptmx.SyscallConn()
	if err != nil {
		return
	}
	c.Control(func(fd uintptr) {
		unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
}

type writerFunc func([]byte) error

func (w writerFunc) Write(p []byte) (int, error) {
	if err := w(p); err != nil {
		return 0, err
	}
	return len(p), nil
}
