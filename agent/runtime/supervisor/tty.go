package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// RunTTY runs argv in a session of its own whose controlling terminal is
// the caller's standard input (a pseudo-terminal the agent opened on the
// node), waits for it and returns its exit status (128+n when signal n
// ended it): what an interactive exec needs for Ctrl-C, job control and
// full-screen programs. A hangup or termination of RunTTY's caller is
// passed on to the session as SIGHUP, as a terminal that goes away does.
func RunTTY(argv []string) (int, error) {
	if len(argv) == 0 {
		return 2, errors.New("tty: no command")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return 127, err
	}
	// liblxc's attach may have made this process the terminal's session
	// leader already: then the command takes its place, terminal and
	// all, in the foreground.
	if sid, err := unix.IoctlGetInt(0, unix.TIOCGSID); err == nil && sid == os.Getpid() {
		unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, os.Getpid())
		return 126, fmt.Errorf("tty: %w", syscall.Exec(path, argv, os.Environ()))
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args = argv
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM)
	// Ctrl-C and Ctrl-\ reach the session through the terminal; here
	// they are ignored so the wrapper outlives its command.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	if err := cmd.Start(); err != nil {
		return 126, fmt.Errorf("tty: %w", err)
	}
	go func() {
		for range sigs {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGHUP)
		}
	}()
	err = cmd.Wait()
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
