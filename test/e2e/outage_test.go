package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// TestCoordinatorOutage: with the coordinator gone, the agent keeps its
// guests as they were, also across its own restart (from its cached
// desired state); when the coordinator returns, work resumes.
func TestCoordinatorOutage(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1")
	c.mustCLI("guest", "create", "keep", "--image", "busybox", "--memory", "64M", "--cpus", "0.1")
	_, pid, err := a.lxc.info("keep")
	if err != nil || pid == 0 {
		t.Fatalf("lxc-info keep = %d, %v", pid, err)
	}

	c.coord.kill()
	a.kill()
	c.restartAgent(a)
	eventually(t, 20*time.Second, "agent notices the coordinator is gone", func() error {
		if !strings.Contains(a.log.String(), "watch stream ended") {
			return fmt.Errorf("no watch failure logged yet")
		}
		return nil
	})
	time.Sleep(5 * time.Second) // several resync periods without a coordinator
	if st, p, _ := a.lxc.info("keep"); st != "RUNNING" || p != pid {
		t.Fatalf("guest during outage = %s pid %d; want RUNNING pid %d, untouched", st, p, pid)
	}

	c.coord = c.coord.restart(t)
	c.waitReady()
	c.mustCLI("guest", "create", "after", "--image", "busybox", "--memory", "64M", "--cpus", "0.1")
	if v := c.guest("keep"); v.Status != "running" || v.Guest.Observed.Pid != strconv.Itoa(pid) {
		t.Errorf("guest keep after the outage = %s pid %s; want running pid %d", v.Status, v.Guest.Observed.Pid, pid)
	}
}

// TestDevRestartAndCleanup: `corpus dev` twice is the same cluster with the
// same running guests, and two at once are refused; Ctrl-C leaves guests
// running; --cleanup removes them. It keeps its state and the operator
// token from other users (checkPrivate).
func TestDevRestartAndCleanup(t *testing.T) {
	requireE2E(t)
	dir := tempDir(t)
	lab := newNetLab(t)
	ns := lab.addNS("dev")
	state := filepath.Join(dir, "dev")
	h := lxcHost{ns: ns, path: filepath.Join(state, "agent", "lxc")}
	t.Cleanup(func() { h.destroyAll(t) })
	env := []string{"XDG_CONFIG_HOME=" + filepath.Join(dir, "cfg"), "CORPUS_ENV=", "CORPUS_ADDR=", "CORPUS_TOKEN=", "CORPUS_CA_CERT="}
	args := []string{"dev", "--state-dir", state, "--api-addr", "127.0.0.1:7400", "--raft-addr", "127.0.0.1:7401", "--agent-addr", "127.0.0.1:7402", "--name", "devnode"}
	// Client commands use the environment `corpus dev` wrote.
	c := &cluster{t: t, dir: dir, cfgHome: filepath.Join(dir, "cfg")}
	cli := func(args ...string) (string, string, int) {
		return c.cliIn(ns, env, args...)
	}
	waitRunning := func(p *proc) {
		eventually(t, 30*time.Second, "corpus dev ready", func() error {
			if out, errOut, code := cli("node", "list"); code != 0 || !strings.Contains(out, " ready ") {
				return fmt.Errorf("node list: exit %d %s %s", code, out, errOut)
			}
			return nil
		})
	}

	// As an older `make demo` left it: open to every user.
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(state, 0o755)
	dev := startIn(t, ns, "corpus dev", env, args...)
	waitRunning(dev)
	if out, errOut, code := cli("guest", "create", "web", "--image", "busybox", "--memory", "64M", "--cpus", "0.1"); code != 0 {
		t.Fatalf("guest create = exit %d: %s %s", code, out, errOut)
	}
	_, pid, _ := h.info("web")
	firstID := devClusterID(cli)
	checkPrivate(t, state, dev.log.String())

	// A second `corpus dev` on the same folder is refused at once, naming
	// the folder and the first one's PID, and the first serves on.
	start := time.Now()
	second := startIn(t, ns, "corpus dev (second)", env, args...)
	select {
	case <-second.done:
	case <-time.After(testrun.D(10 * time.Second)):
		t.Fatalf("a second corpus dev on %s still runs after 10s:\n%s", state, second.log.String())
	}
	want := fmt.Sprintf("state folder %s is in use by process %d", state, dev.cmd.Process.Pid)
	if code := second.cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(second.log.String(), want) {
		t.Errorf("second corpus dev = exit %d after %v:\n%s\nwant non-zero and %q", code, time.Since(start), second.log.String(), want)
	}
	waitRunning(dev)

	dev.stop(t)
	if code := dev.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("corpus dev exit code after SIGINT = %d, want 0", code)
	}
	if st, p, _ := h.info("web"); st != "RUNNING" || p != pid {
		t.Fatalf("after Ctrl-C, guest = %s pid %d; want RUNNING pid %d", st, p, pid)
	}

	dev = startIn(t, ns, "corpus dev (again, --cleanup)", env, append(args, "--cleanup")...)
	waitRunning(dev)
	if again := devClusterID(cli); firstID == "" || again != firstID {
		t.Errorf("cluster id after restart = %q, want %q", again, firstID)
	}
	time.Sleep(3 * time.Second)
	if st, p, _ := h.info("web"); st != "RUNNING" || p != pid {
		t.Errorf("after corpus dev restart, guest = %s pid %d; want RUNNING pid %d (adopted, not restarted)", st, p, pid)
	}
	eventually(t, 10*time.Second, "the node's layer-2 filter", func() error {
		if st := l2State(t, ns); len(st.Ports) != 1 {
			return fmt.Errorf("%+v, want the port of guest web", st)
		}
		return nil
	})
	dev.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-dev.done:
	case <-time.After(testrun.D(90 * time.Second)):
		t.Fatal("corpus dev --cleanup did not exit within 90s")
	}
	if _, err := os.Stat(filepath.Join(h.path, "web")); err == nil {
		t.Errorf("with --cleanup, container web still exists after exit")
	}
	if st := l2State(t, ns); st.Exists {
		t.Errorf("with --cleanup, the node's layer-2 filter is still there after exit: %+v", st)
	}
}

func devClusterID(cli func(...string) (string, string, int)) string {
	out, _, _ := cli("status", "--json")
	var st struct {
		ClusterID string `json:"cluster_id"`
	}
	json.Unmarshal([]byte(out), &st)
	return st.ClusterID
}

// TestAgentCoordinatorFailover: an agent given several coordinator
// addresses, the first of which answers nothing, enrolls, watches and
// reports through the next one, also after a restart.
func TestAgentCoordinatorFailover(t *testing.T) {
	c := newCluster(t)
	tok := strings.TrimSpace(c.mustCLI("node", "token"))
	node := c.lab.addNode("n1")
	a := &agentProc{name: "n1", node: node, stateDir: filepath.Join(c.dir, "agent-n1"), apiAddr: node.addr + ":7402"}
	a.lxc = lxcHost{ns: node.ns, path: filepath.Join(a.stateDir, "lxc")}
	t.Cleanup(func() { a.lxc.destroyAll(t) })
	c.agents["n1"] = a
	// Nothing listens on port 7499 of the coordinator's namespace.
	coords := []string{"--coordinator", node.ctlSide + ":7499", "--coordinator", node.ctlSide + ":7400"}
	a.proc = c.startAgent(a, append([]string{"--join-token", tok}, coords...)...)
	eventually(t, 30*time.Second, "node n1 ready", func() error {
		if out, _, _ := c.cli("node", "list"); !strings.Contains(out, " ready ") {
			return fmt.Errorf("node list: %s", out)
		}
		return nil
	})
	c.mustCLI("guest", "create", "web", "--image", "busybox", "--memory", "64M", "--cpus", "0.1")
	a.kill()
	a.proc = c.startAgent(a, coords...)
	c.mustCLI("guest", "stop", "web")
	c.mustCLI("guest", "start", "web")
	if st, _, err := a.lxc.info("web"); err != nil || st != "RUNNING" {
		t.Errorf("guest after stop/start through the second coordinator address = %s, %v", st, err)
	}
}
