package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// maxRequest bounds one request (a generation's spec is small).
const maxRequest = 1 << 20

// Serve answers requests on the socket until ctx ends, then stops every
// process. One supervisor runs per guest: a second one fails at once.
func (s *Supervisor) Serve(ctx context.Context, socket, lockFile string) error {
	// Minimal images (busybox) may have no /run.
	for _, p := range []string{lockFile, socket} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
	}
	lock, err := os.OpenFile(lockFile, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("another corpus-supervisor runs here (%s is locked)", lockFile)
	}
	os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		ln.Close()
		return err
	}
	if err := s.Restore(); err != nil {
		s.Logger.Warn("restoring the processes of the state file", "error", err)
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				s.StopAll()
				return nil
			}
			return err
		}
		go s.serveConn(c)
	}
}

func (s *Supervisor) serveConn(c net.Conn) {
	defer c.Close()
	var req Request
	if err := json.NewDecoder(io.LimitReader(c, maxRequest)).Decode(&req); err != nil {
		json.NewEncoder(c).Encode(Response{Error: "bad request: " + err.Error()})
		return
	}
	if req.Op == OpFollow {
		s.mu.Lock()
		s.init()
		s.mu.Unlock()
		s.follow(c, req)
		return
	}
	json.NewEncoder(c).Encode(s.Handle(req))
}

// Call sends one request to the supervisor on socket.
func Call(ctx context.Context, socket string, req Request) (*Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("the supervisor does not answer: %w", err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return nil, err
	}
	var res Response
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&res); err != nil {
		return nil, fmt.Errorf("reading the supervisor's answer: %w", err)
	}
	return &res, nil
}

// Detach starts `self daemon` in a session of its own, its output to
// logPath, and waits until it answers on socket (or already did). When
// bootMarker exists, the guest's main command starts the daemon
// (BootScript), and Detach only waits for it.
func Detach(self, socket, bootMarker, logPath string, wait time.Duration) error {
	ping := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := Call(ctx, socket, Request{Op: OpPing})
		return err == nil
	}
	if ping() {
		return nil
	}
	if _, err := os.Stat(bootMarker); err == nil {
		// The guest's main command becomes the supervisor once it is
		// installed: a second one started here would lose the race for
		// the lock or, winning it, end that command and the guest.
		for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if ping() {
				return nil
			}
		}
		return fmt.Errorf("the supervisor the guest's main command starts did not answer within %s", wait)
	}
	if err := os.MkdirAll(LogDir, 0o750); err != nil {
		return err
	}
	out, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(self, "daemon")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if ping() {
			return nil
		}
		select {
		case err := <-exited:
			if ping() {
				return nil // another one won the race and serves
			}
			return fmt.Errorf("the supervisor exited at once (%v): %s", err, lastLines(logPath, 5))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("the supervisor did not answer within %s: %s", wait, lastLines(logPath, 5))
}

// lastLines is the end of a log file, for an error message.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ") + " (" + path + ")"
}
