package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// devArgs are the arguments of a `corpus dev` on state, in a namespace of
// its own (the default ports are its own there).
func devArgs(state string) []string {
	return []string{"dev", "--state-dir", state, "--api-addr", "127.0.0.1:7400", "--raft-addr", "127.0.0.1:7401", "--agent-addr", "127.0.0.1:7402", "--name", "devnode"}
}

// devEnv points a `corpus dev`'s CLI configuration into dir.
func devEnv(dir string) []string {
	return []string{"XDG_CONFIG_HOME=" + filepath.Join(dir, "cfg"), "CORPUS_ENV=", "CORPUS_ADDR=", "CORPUS_TOKEN=", "CORPUS_CA_CERT="}
}

// agentArgs are the arguments of a `corpus agent` on state that has not
// enrolled: it fails, or is stopped, before it calls a coordinator.
func agentArgs(state string) []string {
	return []string{"agent", "--state-dir", state, "--name", "n1", "--coordinator", "127.0.0.1:7400", "--join-token", "not.used.yet", "--api-addr", "127.0.0.1:7402"}
}

// exited waits up to within for p to end, and returns its exit code.
func exited(t *testing.T, p *proc, within time.Duration, why string) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(testrun.D(within)):
		t.Fatalf("%s still runs %s after %s:\n%s", p.name, within, why, p.log.String())
		return 0
	}
}

// TestDaemonsSayWhoHoldsTheirPort: `corpus dev` and `corpus agent` on a
// host whose port 80 another program listens on (nginx, an earlier
// run's proxy) exit non-zero at once, naming the port, the program and
// its PID, and the flag that moves corpus's HTTP ingress. `corpus dev`
// hung, silent, ignoring SIGTERM: its proxy process had logged the
// error in its own log and exited.
func TestDaemonsSayWhoHoldsTheirPort(t *testing.T) {
	requireE2E(t)
	dir := tempDir(t)
	lab := newNetLab(t)
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"dev", devArgs(filepath.Join(dir, "dev"))},
		{"agent", agentArgs(filepath.Join(dir, "agent"))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ns := lab.addNS(tt.name)
			h := holdAddress(t, ns, "tcp", ":80")
			p := startIn(t, ns, "corpus "+tt.args[0], devEnv(dir), tt.args...)
			start := time.Now()
			code := exited(t, p, 60*time.Second, "its port 80 was found taken")
			want := fmt.Sprintf("error: port 80 is in use by %s (pid %d); stop it, or move corpus's HTTP ingress with --proxy-http-addr (e.g. --proxy-http-addr :8080)\n",
				h.name(t), h.cmd.Process.Pid)
			if code == 0 || !strings.Contains(p.log.String(), want) {
				t.Errorf("corpus %s with port 80 taken = exit %d after %s:\n%s\nwant non-zero and %q", tt.name, code, time.Since(start), p.log.String(), want)
			}
			t.Logf("corpus %s: exit %d after %s", tt.name, code, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestDaemonsStopOnSIGTERMWhileStarting: SIGTERM stops `corpus dev` and
// `corpus agent` in their startup too, here while they wait on a proxy
// process that does not answer (another program holds its control
// socket: it accepts and says nothing). `corpus dev --cleanup` stopped
// so exits non-zero: nothing was cleaned up (make demo-clean once sent
// its stop before the agent ran, and was told all went well).
func TestDaemonsStopOnSIGTERMWhileStarting(t *testing.T) {
	requireE2E(t)
	dir := tempDir(t)
	lab := newNetLab(t)
	for _, tt := range []struct {
		name, agentState string
		args             []string
		code             int
	}{
		{"dev", filepath.Join(dir, "dev", "agent"), devArgs(filepath.Join(dir, "dev")), 0},
		{"agent", filepath.Join(dir, "agent"), agentArgs(filepath.Join(dir, "agent")), 0},
		{"devclean", filepath.Join(dir, "devclean", "agent"), append(devArgs(filepath.Join(dir, "devclean")), "--cleanup"), 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ns := lab.addNS(tt.name)
			sock := filepath.Join(tt.agentState, "proxy", "control.sock")
			if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
				t.Fatal(err)
			}
			h := holdAddress(t, ns, "unix", sock)
			p := startIn(t, ns, "corpus "+tt.args[0], devEnv(dir), tt.args...)
			select {
			case <-h.accepted: // it asks the proxy how it is, and waits
			case <-p.done:
				t.Fatalf("corpus %s ended before asking its proxy:\n%s", tt.name, p.log.String())
			case <-time.After(testrun.D(60 * time.Second)):
				t.Fatalf("corpus %s did not ask its proxy within 60s:\n%s", tt.name, p.log.String())
			}
			sent := time.Now()
			p.cmd.Process.Signal(syscall.SIGTERM)
			if code := exited(t, p, 5*time.Second, "SIGTERM"); code != tt.code {
				t.Errorf("corpus %s stopped by SIGTERM while starting = exit %d, want %d:\n%s", strings.Join(tt.args, " "), code, tt.code, p.log.String())
			}
			if tt.code != 0 && !strings.Contains(p.log.String(), "nothing was cleaned up") {
				t.Errorf("corpus %s stopped while starting does not say nothing was cleaned up:\n%s", strings.Join(tt.args, " "), p.log.String())
			}
			// A stop is no reason to start a proxy process (which would
			// outlive it).
			if pid := proxyOf(filepath.Join(tt.agentState, "proxy")); pid != 0 {
				t.Errorf("corpus %s started a proxy process (pid %d) as it stopped", tt.name, pid)
			}
			t.Logf("corpus %s stopped %s after SIGTERM", tt.name, time.Since(sent).Round(time.Millisecond))
		})
	}
}

// checkPrivate checks what a `corpus dev` on state leaves other users of
// the host: its state folder they may not list or write; the operator
// token is in nothing it printed (out: what a log of it holds) and in no
// file they may read; no log of it is theirs to read. Guests' root file
// systems and the images they come from are the guests' own.
func checkPrivate(t *testing.T, state, out string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(state, "coordinator", "ops-token"))
	tok := strings.TrimSpace(string(b))
	if err != nil || len(tok) < 16 {
		t.Fatalf("the operator token: %q, %v", tok, err)
	}
	if strings.Contains(out, tok) {
		t.Errorf("corpus dev printed the operator token:\n%s", out)
	}
	if fi, err := os.Stat(state); err != nil || fi.Mode().Perm()&0o066 != 0 {
		t.Errorf("state folder %s: %v, %v; want no reading or writing by group or others", state, fi.Mode(), err)
	}
	filepath.WalkDir(state, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == "rootfs" || d.Name() == ".images" || d.Name() == "mnt") {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o004 == 0 {
			return nil
		}
		if strings.HasSuffix(path, ".log") || strings.Contains(path, "/logs/") {
			t.Errorf("log %s is readable by every user (%v)", path, fi.Mode())
		}
		if fi.Size() < 1<<20 {
			if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), tok) {
				t.Errorf("%s holds the operator token and is readable by every user (%v)", path, fi.Mode())
			}
		}
		return nil
	})
}
