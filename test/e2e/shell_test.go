package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"corpus/internal/testrun"
)

// termSession is the corpus client running on a pseudo-terminal of the
// test, as in a user's terminal emulator.
type termSession struct {
	t    *testing.T
	cmd  *exec.Cmd
	ptmx *os.File
	tty  *os.File
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	code int
}

func (c *cluster) startTerminal(token string, rows, cols uint16, args ...string) *termSession {
	c.t.Helper()
	args = append([]string{"--net=/run/netns/" + c.lab.ctl, corpusBin, "--address", c.api, "--token", token, "--ca-cert", c.ca}, args...)
	return startOnTerminal(c.t, rows, cols, []string{"XDG_CONFIG_HOME=" + c.cfgHome, "CORPUS_ENV=", "CORPUS_ADDR=", "CORPUS_TOKEN=", "CORPUS_CA_CERT="}, "nsenter", args...)
}

// sshTerminal runs OpenSSH's client as user, from the client's
// namespace, to the node's SSH endpoint, on a terminal.
func (l *deployLab) sshTerminal(user string, args ...string) *termSession {
	l.t.Helper()
	args = append([]string{"--net=/run/netns/" + l.client, "ssh", "-i", l.keys[user], "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-p", "2222"}, args...)
	return startOnTerminal(l.t, 24, 80, []string{"HOME=" + filepath.Dir(l.keys[user])}, "nsenter", args...)
}

func startOnTerminal(t *testing.T, rows, cols uint16, env []string, name string, args ...string) *termSession {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	pty.Setsize(ptmx, &pty.Winsize{Rows: rows, Cols: cols})
	cmd := exec.Command(name, args...)
	cmd.Env = append(append(os.Environ(), "TERM=xterm"), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &termSession{t: t, cmd: cmd, ptmx: ptmx, tty: tty, done: make(chan struct{})}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			s.mu.Lock()
			s.out.Write(buf[:n])
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		cmd.Wait()
		s.code = cmd.ProcessState.ExitCode()
		close(s.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-s.done
		ptmx.Close()
		tty.Close()
	})
	return s
}

func (s *termSession) send(keys string) {
	s.t.Helper()
	if _, err := s.ptmx.Write([]byte(keys)); err != nil {
		s.t.Fatal(err)
	}
}

// expect waits for want in what the terminal showed after mark, and
// returns the position after it.
func (s *termSession) expect(mark int, want string) int {
	s.t.Helper()
	var at int
	eventually(s.t, 15*time.Second, fmt.Sprintf("%q on the terminal", want), func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if i := bytes.Index(s.out.Bytes()[mark:], []byte(want)); i >= 0 {
			at = mark + i + len(want)
			return nil
		}
		return fmt.Errorf("terminal so far: %q", s.out.String()[max(0, s.out.Len()-300):])
	})
	return at
}

func (s *termSession) exited(t *testing.T) int {
	t.Helper()
	select {
	case <-s.done:
		return s.code
	case <-time.After(testrun.D(15 * time.Second)):
		t.Fatalf("the client did not exit; terminal: %q", s.out.String())
		return -1
	}
}

// TestShell: `guest exec -it` gives a real terminal end to end: its size
// and changes of it, Ctrl-C ending a command, a full-screen editor, the
// exit status back and the local terminal restored; a client that goes
// away leaves nothing running in the guest; `corpus shell` opens in the
// serving release; sessions are audited; another project's dev is
// refused.
func TestShell(t *testing.T) {
	l := newDeployLab(t)
	c := l.c
	l.commitProcSite("one")
	l.mustPush()

	s := c.startTerminal(c.token, 40, 120, "guest", "exec", "-it", "hello-dev", "--", "sh")
	initial, err := unix.IoctlGetTermios(int(s.tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	mark := 0
	s.send("stty size\r")
	mark = s.expect(mark, "40 120")
	// A new window size reaches the guest's terminal.
	pty.Setsize(s.ptmx, &pty.Winsize{Rows: 50, Cols: 100})
	eventually(t, 10*time.Second, "the new size in the guest", func() error {
		s.send("stty size\r")
		s.mu.Lock()
		defer s.mu.Unlock()
		if !strings.Contains(s.out.String()[mark:], "50 100") {
			return fmt.Errorf("no 50 100 yet")
		}
		return nil
	})
	mark = s.expect(mark, "50 100")
	// Ctrl-C ends a running command, not the session.
	s.send("sleep 100; echo slept-$((1+1))-through\r")
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	s.send("\x03")
	s.send("echo after-$((40+2))\r")
	mark = s.expect(mark, "after-42")
	if took := time.Since(start); took > testrun.D(10*time.Second) {
		t.Errorf("Ctrl-C took %s to end sleep", took)
	}
	s.mu.Lock()
	if strings.Contains(s.out.String(), "slept-2-through") {
		t.Error("Ctrl-C did not reach sleep")
	}
	s.mu.Unlock()
	// A full-screen editor opens and quits.
	s.send("vi /tmp/shell-test.txt\r")
	mark = s.expect(mark, "\x1b[")
	time.Sleep(300 * time.Millisecond)
	s.send("ihello from vi")
	time.Sleep(300 * time.Millisecond)
	s.send("\x1b") // alone: an escape followed at once by more reads as a key sequence
	time.Sleep(300 * time.Millisecond)
	s.send(":wq\r")
	s.send("cat /tmp/shell-test.txt\r")
	mark = s.expect(mark, "hello from vi")
	// The exit status comes back; the local terminal is as it was.
	s.send("exit 3\r")
	if code := s.exited(t); code != 3 {
		t.Errorf("exit status %d, want 3", code)
	}
	after, err := unix.IoctlGetTermios(int(s.tty.Fd()), unix.TCGETS)
	if err != nil || after.Lflag != initial.Lflag || after.Iflag != initial.Iflag || after.Oflag != initial.Oflag {
		t.Errorf("the terminal was not restored: lflag %#x iflag %#x oflag %#x, was %#x %#x %#x (%v)",
			after.Lflag, after.Iflag, after.Oflag, initial.Lflag, initial.Iflag, initial.Oflag, err)
	}

	// A client that goes away (killed) leaves nothing in the guest.
	gone := c.startTerminal(c.token, 24, 80, "guest", "exec", "-it", "hello-dev", "--", "sh", "-c", "sleep 4321 & sleep 4322")
	eventually(t, 15*time.Second, "the session's commands running", func() error {
		if out := l.guestSh("ps"); !strings.Contains(out, "sleep 4322") {
			return fmt.Errorf("ps:\n%s", out)
		}
		return nil
	})
	gone.cmd.Process.Kill()
	eventually(t, 15*time.Second, "the session's commands gone", func() error {
		if out := l.guestSh("ps"); strings.Contains(out, "sleep 432") {
			return fmt.Errorf("still running after the client went:\n%s", out)
		}
		return nil
	})
	// So does a login shell's, with jobs in process groups of their own.
	l.killedLoginShell("corpus shell", func() *termSession { return c.startTerminal(c.token, 24, 80, "shell", "hello") })

	// corpus shell opens in the serving release, with the environment
	// its processes get (the config, secrets decrypted); with a command,
	// runs it so.
	const dbURL = "postgres://app:s3cret-4712@db.internal/app"
	c.mustCLI("config", "set", "hello", "DATABASE_URL="+dbURL)
	sh := c.startTerminal(c.token, 24, 80, "shell", "hello")
	sh.send("pwd; echo \"db=$DATABASE_URL $CORPUS_PROCESS $CORPUS_RELEASE\"\r")
	sh.expect(sh.expect(0, "/srv/projects/hello/current"), "db="+dbURL+" shell r2")
	sh.send("exit\r")
	if code := sh.exited(t); code != 0 {
		t.Errorf("corpus shell exit status %d", code)
	}
	if out := c.mustCLI("shell", "hello", "--", "cat", "www/index.html"); strings.TrimSpace(out) != "version one" {
		t.Errorf("corpus shell hello -- cat: %q", out)
	}
	if out := c.mustCLI("shell", "hello", "--", "sh", "-c", "echo $DATABASE_URL $HOME"); strings.TrimSpace(out) != dbURL+" /srv/projects/hello/releases/r2" {
		t.Errorf("corpus shell hello -- echo $DATABASE_URL $HOME: %q", out)
	}
	// Without -t, stdin streams through a pipe, its end passed on.
	piped := exec.Command("nsenter", "--net=/run/netns/"+c.lab.ctl, corpusBin, "--address", c.api, "--token", c.token, "--ca-cert", c.ca,
		"guest", "exec", "-i", "hello-dev", "--", "sh")
	piped.Env = append(os.Environ(), "XDG_CONFIG_HOME="+c.cfgHome, "CORPUS_ENV=", "CORPUS_ADDR=", "CORPUS_TOKEN=", "CORPUS_CA_CERT=")
	piped.Stdin = strings.NewReader("echo piped-$((2+3))\nexit 4\n")
	out, err := piped.Output()
	if code := piped.ProcessState.ExitCode(); strings.TrimSpace(string(out)) != "piped-5" || code != 4 {
		t.Errorf("exec -i with piped input: %q, exit %d, %v", out, code, err)
	}

	// Sessions are in the audit log, start and end.
	audit := c.mustCLI("audit", "--json")
	if !strings.Contains(audit, "shell_guest") || !strings.Contains(audit, "exit status 3") || !strings.Contains(audit, "on a terminal") {
		t.Errorf("the audit log lacks the sessions:\n%s", grepLines(audit, "shell"))
	}
	if strings.Contains(audit, "hello from vi") {
		t.Error("the audit log has what was typed")
	}

	// SSH, with the keys and rights of git push: a shell on a terminal
	// in the serving release, a command without one; refused for a dev
	// without the grant, and for forwarding and sftp.
	ssh := l.sshTerminal("alice", "-t", "git@"+l.nodeAddr, "shell", "hello")
	ssh.send("pwd; stty size\r")
	m := ssh.expect(0, "/srv/projects/hello/current")
	ssh.expect(m, "24 80")
	ssh.send("exit 6\r")
	if code := ssh.exited(t); code != 6 {
		t.Errorf("ssh shell exit status %d, want 6", code)
	}
	l.killedLoginShell("ssh shell", func() *termSession { return l.sshTerminal("alice", "-t", "git@"+l.nodeAddr, "shell", "hello") })
	sshCmd := func(user string, args ...string) (string, int) {
		cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + l.client, "ssh", "-i", l.keys[user], "-o", "IdentitiesOnly=yes",
			"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-p", "2222"}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+filepath.Dir(l.keys[user]))
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	if out, code := sshCmd("alice", "git@"+l.nodeAddr, "shell", "hello/dev", "cat www/index.html; echo db=$DATABASE_URL; exit 2"); code != 2 || !containsAll(out, "version one", "db="+dbURL) {
		t.Errorf("ssh shell with a command: %d %q", code, out)
	}
	if out, code := sshCmd("bob", "git@"+l.nodeAddr, "shell", "hello", "touch /tmp/bob-was-here"); code == 0 || !strings.Contains(out, "may not use project hello") {
		t.Errorf("bob's ssh shell: %d %q", code, out)
	}
	if out := l.guestSh("ls /tmp"); strings.Contains(out, "bob-was-here") {
		t.Error("bob's refused command ran")
	}
	wantAudit(t, c, "refused ssh shell", "user:bob", "hello", "may not use project hello")
	if out, code := sshCmd("alice", "-s", "git@"+l.nodeAddr, "sftp"); code == 0 {
		t.Errorf("the sftp subsystem was accepted: %q", out)
	}
	if out, code := sshCmd("alice", "-o", "ExitOnForwardFailure=yes", "-R", "127.0.0.1:18080:127.0.0.1:80", "git@"+l.nodeAddr, "shell", "hello", "true"); code == 0 {
		t.Errorf("a remote port forward was accepted: %q", out)
	}
	if out, code := sshCmd("alice", "-W", "127.0.0.1:80", "git@"+l.nodeAddr); code == 0 {
		t.Errorf("a forwarded connection was accepted: %q", out)
	}
	if audit := c.mustCLI("audit", "--json"); !strings.Contains(audit, "over ssh on a terminal") || !strings.Contains(audit, "exit status 6") || !strings.Contains(audit, "user:alice") {
		t.Errorf("the audit log lacks the ssh sessions:\n%s", grepLines(audit, "ssh"))
	}

	// A dev without the grant is refused, and nothing runs.
	c.mustCLI("user", "add", "carol", "--role", "dev")
	var tok struct {
		Token string `json:"token"`
	}
	if err := c.json(&tok, "user", "token", "create", "carol", "--ttl", "1h"); err != nil {
		t.Fatal(err)
	}
	refused := c.startTerminal(tok.Token, 24, 80, "guest", "exec", "-it", "hello-dev", "--", "sh", "-c", "touch /tmp/carol-was-here")
	if code := refused.exited(t); code == 0 {
		t.Error("carol's session in hello-dev was accepted")
	}
	refused.expect(0, "may not use project hello")
	if out := l.guestSh("ls /tmp"); strings.Contains(out, "carol-was-here") {
		t.Error("carol's refused command ran")
	}
}

// killedLoginShell opens a login shell with open, starts a background
// job and a foreground one in it, kills the client by its PID, and checks
// that nothing of the session stays in the guest (the shell, its jobs),
// that the agent closed the session's terminal and that the audit log
// says the session ended, once. No other session may be open.
func (l *deployLab) killedLoginShell(what string, open func() *termSession) {
	t := l.t
	t.Helper()
	agent := l.a.proc.cmd.Process.Pid
	// The session before ended when its client did; the agent closes its
	// terminal a moment later, and counted meanwhile it would be taken
	// for one that stays open.
	const held = 0
	eventually(t, 15*time.Second, what+": the terminals of the sessions before closed", func() error {
		if n := ptyMains(agent); n != held {
			return fmt.Errorf("the agent holds %d terminals", n)
		}
		return nil
	})
	ended := strings.Count(l.c.mustCLI("audit", "--json"), "ended after")
	s := open()
	s.send("echo shell=$((1000+$$)); sleep 4331 &\r")
	var shell int
	eventually(t, 15*time.Second, what+": the shell's pid", func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		m := regexp.MustCompile(`shell=(\d+)`).FindStringSubmatch(s.out.String())
		if m == nil {
			return fmt.Errorf("terminal so far: %q", s.out.String())
		}
		shell, _ = strconv.Atoi(m[1])
		shell -= 1000
		return nil
	})
	s.send("sleep 4332\r")
	running := func(ps string) (left []string) {
		for _, line := range strings.Split(ps, "\n") {
			if f := strings.Fields(line); len(f) > 0 && (f[0] == strconv.Itoa(shell) || strings.Contains(line, "sleep 433")) {
				left = append(left, strings.TrimSpace(line))
			}
		}
		return left
	}
	eventually(t, 15*time.Second, what+": the jobs running", func() error {
		if left := running(l.guestSh("ps")); len(left) != 3 {
			return fmt.Errorf("the shell (%d) and its jobs in ps: %q", shell, left)
		}
		if n := ptyMains(agent); n != held+1 {
			return fmt.Errorf("the agent holds %d terminals, want %d", n, held+1)
		}
		return nil
	})
	start := time.Now()
	s.cmd.Process.Kill()
	eventually(t, 15*time.Second, what+": nothing of the session left", func() error {
		if left := running(l.guestSh("ps")); len(left) > 0 {
			return fmt.Errorf("still in the guest after the client was killed: %q", left)
		}
		if n := ptyMains(agent); n != held {
			return fmt.Errorf("the agent holds %d terminals, want %d", n, held)
		}
		return nil
	})
	t.Logf("%s: the session ended %s after its client was killed", what, time.Since(start).Round(100*time.Millisecond))
	eventually(t, 15*time.Second, what+": the end in the audit log", func() error {
		if n := strings.Count(l.c.mustCLI("audit", "--json"), "ended after"); n != ended+1 {
			return fmt.Errorf("%d ends recorded, want %d", n-ended, 1)
		}
		return nil
	})
}

// ptyMains counts the pseudo-terminal main ends process pid holds open.
func ptyMains(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, _ := os.ReadDir(dir)
	n := 0
	for _, fd := range fds {
		if target, _ := os.Readlink(filepath.Join(dir, fd.Name())); target == "/dev/ptmx" || target == "/dev/pts/ptmx" {
			n++
		}
	}
	return n
}
