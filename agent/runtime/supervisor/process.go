package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"corpus/internal/procfs"
)

// Restart backoff: the first restart after a quick exit waits
// backoffMin, doubling up to backoffMax; a process that ran steadyUptime
// starts the count again.
const (
	backoffMin   = 100 * time.Millisecond
	backoffMax   = 30 * time.Second
	steadyUptime = 10 * time.Second
)

// DefaultGrace is a stopping process's grace when its generation gives
// none.
const DefaultGrace = 10 * time.Second

// proc is one process of a generation: its run loop restarts it.
type proc struct {
	s    *Supervisor
	gen  Generation
	spec Process
	log  *logFile

	stopCh   chan struct{} // closed to stop
	done     chan struct{} // closed when the loop ended
	stopOnce sync.Once

	mu       sync.Mutex
	state    string
	pid      int
	pstart   string // the running process's /proc start time
	restarts int
	started  time.Time
	lastExit string
	ready    bool // the caller's check passed (OpReady)
}

func (p *proc) loop() {
	defer close(p.done)
	fails := 0
	for first := true; ; first = false {
		if !first {
			p.mu.Lock()
			p.restarts++
			p.mu.Unlock()
		}
		began := time.Now()
		err := p.runOnce()
		p.mu.Lock()
		p.pid, p.pstart = 0, ""
		p.lastExit = exitText(err)
		p.mu.Unlock()
		p.s.saved()
		select {
		case <-p.stopCh:
			p.setState(StateStopped)
			return
		default:
		}
		if time.Since(began) >= steadyUptime {
			fails = 0
		}
		delay := backoffMin << min(fails, 10)
		delay = min(delay, backoffMax)
		fails++
		p.setState(StateBackoff)
		p.log.line(p.gen.ID, p.spec.Name, 0, fmt.Sprintf("[corpus] exited (%s); starting again in %s", exitText(err), delay))
		select {
		case <-p.stopCh:
			p.setState(StateStopped)
			return
		case <-time.After(delay):
		}
	}
}

func exitText(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit status 0"
	case errors.As(err, &ee):
		return ee.ProcessState.String()
	}
	return err.Error()
}

func (p *proc) setState(s string) {
	p.mu.Lock()
	p.state = s
	p.mu.Unlock()
}

// runOnce starts the process and waits for it to end.
func (p *proc) runOnce() error {
	env, err := p.environ()
	if err != nil {
		p.log.line(p.gen.ID, p.spec.Name, 0, "[corpus] "+err.Error())
		return err
	}
	cmd := exec.Command("/bin/sh", "-c", p.spec.Command)
	if len(p.spec.Argv) > 0 {
		// Found in Root's PATH, not the guest's: exec looks it up after
		// the chroot.
		cmd = &exec.Cmd{Path: p.spec.Argv[0], Args: p.spec.Argv}
	}
	cmd.Dir = p.gen.Dir
	cmd.SysProcAttr = runAs("", p.gen.UID, p.gen.GID)
	cmd.SysProcAttr.Setpgid = true
	if p.gen.Root != "" {
		// An image's tree: through corpus-supervisor chroot, which
		// mounts /proc and /dev there first (chroot.go).
		self, err := os.Executable()
		if err != nil {
			p.log.line(p.gen.ID, p.spec.Name, 0, "[corpus] cannot start: "+err.Error())
			return err
		}
		cmd = chrootCmd(self, p.gen.Root, p.gen.Dir, p.gen.UID, p.gen.GID, p.ownNet(), cmd.Args)
	}
	cmd.Env = env
	// Output goes through a pipe of our own, so Wait returns when the
	// process ends even if a child of it keeps the pipe open.
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = w, w
	p.mu.Lock()
	select {
	case <-p.stopCh:
		p.mu.Unlock()
		r.Close()
		w.Close()
		return errors.New("stopped before it started")
	default:
	}
	err = cmd.Start()
	w.Close()
	if err != nil {
		p.mu.Unlock()
		r.Close()
		p.log.line(p.gen.ID, p.spec.Name, 0, "[corpus] cannot start: "+err.Error())
		return err
	}
	p.pid = cmd.Process.Pid
	p.pstart = procfs.Start(p.pid)
	p.started = time.Now()
	p.state = StateRunning
	p.mu.Unlock()
	p.s.saved()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		p.log.copy(r, p.gen.ID, p.spec.Name, cmd.Process.Pid)
		r.Close()
	}()
	err = cmd.Wait()
	// What the process left in its group goes with it.
	killGroup(cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-copied:
	case <-time.After(time.Second):
		r.Close()
	}
	return err
}

// environ is what the process gets (Environ).
func (p *proc) environ() ([]string, error) {
	port := p.spec.Port
	if n := p.ownNet(); n != (ownNet{}) {
		port = n.inner
	}
	return Environ(p.gen.Dir, p.gen.EnvFile, p.spec.Name, port)
}

// ownNet is the process's own network, when it has one: a process of
// an image's tree with a port the guest's leads to and one of its own.
func (p *proc) ownNet() ownNet {
	if p.gen.Root == "" || p.spec.Port == 0 || p.spec.InnerPort == 0 {
		return ownNet{}
	}
	return ownNet{outer: p.spec.Port, inner: p.spec.InnerPort}
}

// stop ends the process: its stop signal (SIGTERM unless it names one)
// to its group, SIGKILL after the grace.
func (p *proc) stop() {
	p.stopOnce.Do(func() {
		p.mu.Lock()
		close(p.stopCh)
		pid := p.pid
		if p.state == StateRunning || p.state == StateStarting {
			p.state = StateStopping
		}
		p.mu.Unlock()
		grace := time.Duration(p.gen.Grace)
		if grace <= 0 {
			grace = DefaultGrace
		}
		if pid > 0 {
			sig := syscall.SIGTERM
			if p.spec.StopSignal > 0 {
				sig = syscall.Signal(p.spec.StopSignal)
			}
			killGroup(pid, sig)
			p.log.line(p.gen.ID, p.spec.Name, pid, fmt.Sprintf("[corpus] stopping (%s; SIGKILL after %s)", signalName(sig), grace))
		}
		select {
		case <-p.done:
			return
		case <-time.After(grace):
		}
		if pid > 0 {
			killGroup(pid, syscall.SIGKILL)
		}
	})
	<-p.done
}

// signalName is how the log names sig: SIGTERM, or its number.
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return fmt.Sprintf("signal %d", int(sig))
}

func (p *proc) status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Status{
		Project: p.gen.Project, Generation: p.gen.ID, Release: p.gen.Release, Name: p.spec.Name, Command: p.spec.Command,
		State: p.state, PID: p.pid, Port: p.spec.Port, Restarts: p.restarts, StartedAt: p.started, LastExit: p.lastExit,
	}
}

// group is the process group the running process leads.
func (p *proc) group() (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid, p.pstart
}

// Log capture: one file per project and process type, every generation
// writing to it, capped and rotated once (NAME.log.1), lines stamped.
const (
	maxLogFile = 4 << 20
	maxLine    = 16 << 10
	tailLines  = 20
)

type logFile struct {
	path    string
	project string
	journal *journal

	mu    sync.Mutex
	f     *os.File
	size  int64
	lines map[string][]string // generation/name → its last lines
}

// copy reads a process's output line by line into the log.
func (l *logFile) copy(r io.Reader, gen, name string, pid int) {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			text := strings.TrimRight(string(line), "\n")
			if errors.Is(err, bufio.ErrBufferFull) {
				text += " [line cut at 16 KiB]"
				// Skip the rest of the long line.
				for errors.Is(err, bufio.ErrBufferFull) {
					_, err = br.ReadSlice('\n')
				}
			}
			l.line(gen, name, pid, text)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

func (l *logFile) line(gen, name string, pid int, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lines == nil {
		l.lines = map[string][]string{}
	}
	t := append(l.lines[gen+"/"+name], text)
	if len(t) > tailLines {
		t = t[len(t)-tailLines:]
	}
	l.lines[gen+"/"+name] = t
	who := name
	if pid > 0 {
		who = fmt.Sprintf("%s[%d]", name, pid)
	}
	now := time.Now().UTC()
	if l.journal != nil {
		l.journal.add(Record{Time: now, Project: l.project, Gen: gen, Name: name, PID: pid, Line: text})
	}
	rec := fmt.Sprintf("%s %s %s: %s\n", now.Format("2006-01-02T15:04:05.000Z"), gen, who, text)
	if err := l.open(); err != nil {
		return
	}
	if l.size+int64(len(rec)) > maxLogFile {
		l.f.Close()
		l.f = nil
		os.Rename(l.path, l.path+".1")
		if err := l.open(); err != nil {
			return
		}
	}
	n, _ := l.f.WriteString(rec)
	l.size += int64(n)
}

func (l *logFile) open() error {
	if l.f != nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(l.path), 0o750); err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, st.Size()
	return nil
}

// tail is the last lines of a process of a generation.
func (l *logFile) tail(gen, name string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines[gen+"/"+name]...)
}
