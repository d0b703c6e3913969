package supervisor

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"corpus/internal/testrun"
)

// TestMain runs RunTTY itself when asked (the command in
// CORPUS_TEST_RUNTTY, as JSON): it takes the process's standard input as
// the terminal, as corpus-supervisor tty does. So for ExecInRelease
// (CORPUS_TEST_EXECINRELEASE: its arguments), as corpus-supervisor env,
// and RunChrooted when the supervisor runs an image's process through
// itself, here the test binary (ChrootCommand).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ChrootCommand {
		code, err := RunChrooted(os.Args[2:])
		if err != nil {
			fmt.Fprintln(os.Stderr, "corpus-supervisor:", err)
		}
		os.Exit(code)
	}
	if v := os.Getenv("CORPUS_TEST_RUNTTY"); v != "" {
		var argv []string
		json.Unmarshal([]byte(v), &argv)
		code, err := RunTTY(argv)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		os.Exit(code)
	}
	if v := os.Getenv("CORPUS_TEST_EXECINRELEASE"); v != "" {
		var args []string
		json.Unmarshal([]byte(v), &args)
		err := ExecInRelease(args[0], args[1], args[2:])
		fmt.Fprintln(os.Stderr, err)
		os.Exit(127)
	}
	os.Exit(m.Run())
}

// running says whether a process whose command line is cmdline runs.
func running(cmdline string) bool {
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ") == cmdline {
			if st, err := os.ReadFile(filepath.Join(filepath.Dir(f), "stat")); err == nil && !strings.Contains(string(st), ") Z ") {
				return true
			}
		}
	}
	return false
}

// startRunTTY runs RunTTY on a new pseudo-terminal; leader makes it the
// terminal's session leader first (as liblxc's attach does), else the
// command makes a session of its own.
func startRunTTY(t *testing.T, leader bool, argv ...string) (*os.File, *exec.Cmd, <-chan error) {
	t.Helper()
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	defer tty.Close()
	b, _ := json.Marshal(argv)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "CORPUS_TEST_RUNTTY="+string(b))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if leader {
		cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, 0
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return master, cmd, done
}

// TestRunTTYEndsTheSession: a terminal that goes away, or a command that
// ends, leaves nothing of the session running, background jobs included.
func TestRunTTYEndsTheSession(t *testing.T) {
	for _, leader := range []bool{false, true} {
		t.Run(fmt.Sprintf("leader=%v", leader), func(t *testing.T) {
			n := 4300
			if leader {
				n = 4400
			}
			bg, fg := fmt.Sprintf("sleep %d", n+1), fmt.Sprintf("sleep %d", n+2)
			master, _, done := startRunTTY(t, leader, "sh", "-c", bg+" & "+fg)
			waitFor(t, "the session's commands", func() bool { return running(bg) && running(fg) })
			master.Close() // the client went away
			select {
			case <-done:
			case <-time.After(testrun.D(10 * time.Second)):
				t.Fatal("RunTTY went on after its terminal went away")
			}
			waitFor(t, "nothing left", func() bool { return !running(bg) && !running(fg) })

			// A command that ends by itself takes its background job along.
			bg = fmt.Sprintf("sleep %d", n+3)
			master, cmd, done := startRunTTY(t, leader, "sh", "-c", bg+" & sleep 0.3; exit 4")
			go func(master *os.File) {
				buf := make([]byte, 512)
				for {
					if _, err := master.Read(buf); err != nil {
						return
					}
				}
			}(master)
			select {
			case <-done:
			case <-time.After(testrun.D(10 * time.Second)):
				t.Fatal("RunTTY did not end with its command")
			}
			if code := cmd.ProcessState.ExitCode(); code != 4 {
				t.Errorf("exit status %d, want 4", code)
			}
			waitFor(t, "the background job gone", func() bool { return !running(bg) })

			// Ctrl-C reaches the command (the wrapper's own handling of
			// it is not inherited).
			fg = fmt.Sprintf("sleep %d", n+4)
			master, cmd, done = startRunTTY(t, leader, "sleep", fmt.Sprint(n+4))
			waitFor(t, "the command", func() bool { return running(fg) })
			master.Write([]byte{3})
			select {
			case <-done:
			case <-time.After(testrun.D(10 * time.Second)):
				t.Fatal("Ctrl-C did not end the command")
			}
			if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGINT) {
				t.Errorf("exit status after Ctrl-C = %d, want %d", code, 128+int(syscall.SIGINT))
			}
		})
	}
}
