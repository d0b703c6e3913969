package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"corpus/internal/procfs"
)

// RunTTY runs argv on the caller's standard input as its controlling
// terminal (a pseudo-terminal the agent opened on the node), waits for it
// and returns its exit status (128+n when signal n ended it): what an
// interactive exec needs for Ctrl-C, job control and full-screen
// programs. When the command ends, or the terminal or RunTTY's caller
// goes away, every process left in the session is hung up (SIGHUP), not
// only the one the kernel tells: background jobs end with the session
// whatever the order of exits was (nohup and daemons, which make a
// session of their own, stay).
func RunTTY(argv []string) (int, error) {
	if len(argv) == 0 {
		return 2, errors.New("tty: no command")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return 127, err
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args = argv
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	var sid int
	if s, err := unix.IoctlGetInt(0, unix.TIOCGSID); err == nil && s == os.Getpid() {
		// liblxc's attach made this process the terminal's session
		// leader already: the command runs in a process group of its
		// own in the foreground, and this process, the leader, is told
		// of the hangup.
		sid = os.Getpid()
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Foreground: true, Ctty: 0}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM)
	// Ctrl-C and Ctrl-\ reach the command through the terminal; here
	// they are caught and dropped so the wrapper outlives its command.
	// So are the background-group signals: the command's group has the
	// terminal. Caught, not ignored: an ignored signal stays ignored in
	// the command and what it runs.
	dropped := make(chan os.Signal, 4)
	signal.Notify(dropped, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	go func() {
		for range dropped {
		}
	}()
	if err := cmd.Start(); err != nil {
		return 126, fmt.Errorf("tty: %w", err)
	}
	if sid == 0 {
		sid = cmd.Process.Pid
	}
	go func() {
		for range sigs {
			signalSession(sid, syscall.SIGHUP)
		}
	}()
	err = cmd.Wait()
	endSession(sid)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}

// endSession hangs up what is left in session sid, as the end of a
// login does; what ignores it (nohup) stays.
func endSession(sid int) { signalSession(sid, syscall.SIGHUP) }

// signalSession sends sig, and SIGCONT so a stopped job sees it, to
// every process of session sid but this one.
func signalSession(sid int, sig syscall.Signal) {
	self := os.Getpid()
	for _, pid := range procfs.Session(sid) {
		if pid != self {
			syscall.Kill(pid, sig)
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}
