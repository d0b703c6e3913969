package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGuestLifecycle: create → running → exec → stop → start → delete,
// checked against LXC's own view of the host.
func TestGuestLifecycle(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1")

	c.mustCLI("guest", "create", "web", "--image", "busybox", "--memory", "128M", "--cpus", "0.5", "--env", "GREETING=hi")
	v := c.guest("web")
	if v.Status != "running" || v.NodeName != "n1" {
		t.Fatalf("guest show web = status %q on %q, want running on n1", v.Status, v.NodeName)
	}
	st, pid, err := a.lxc.info("web")
	if err != nil || st != "RUNNING" {
		t.Fatalf("lxc-info web = %q, %v; want RUNNING", st, err)
	}
	if got := v.Guest.Observed.Pid; got != strconv.Itoa(pid) {
		t.Errorf("observed pid = %s, lxc-info pid = %d", got, pid)
	}

	// exec passes output and exit code through.
	out, errOut, code := c.cli("guest", "exec", "web", "--", "sh", "-c", "echo out:$GREETING; echo err >&2; exit 3")
	if code != 3 || out != "out:hi\n" || errOut != "err\n" {
		t.Errorf("guest exec = (%q, %q, exit %d), want (\"out:hi\\n\", \"err\\n\", exit 3)", out, errOut, code)
	}
	out, _, code = c.cli("guest", "exec", "web", "-i", "--", "cat")
	if code != 0 || out != "" {
		t.Errorf("guest exec -i cat with empty stdin = (%q, exit %d)", out, code)
	}
	// The memory limit is in force on the guest's cgroup.
	if got, err := memoryLimit(pid); err != nil || got != 128<<20 {
		t.Errorf("memory limit of guest cgroup = %d, %v; want %d", got, err, 128<<20)
	}

	c.mustCLI("guest", "stop", "web")
	if st, _, _ := a.lxc.info("web"); st != "STOPPED" {
		t.Errorf("after stop, lxc-info = %q, want STOPPED", st)
	}
	if _, errOut, code := c.cli("guest", "exec", "web", "--", "true"); code == 0 || !strings.Contains(errOut, "not running") {
		t.Errorf("exec in a stopped guest = exit %d, %q; want a clear refusal", code, errOut)
	}
	c.mustCLI("guest", "start", "web")
	if st, _, _ := a.lxc.info("web"); st != "RUNNING" {
		t.Errorf("after start, lxc-info = %q, want RUNNING", st)
	}

	c.mustCLI("guest", "delete", "web")
	if slices.Contains(a.lxc.list(), "web") {
		t.Errorf("container web still exists after delete: %v", a.lxc.list())
	}
	if _, errOut, code := c.cli("guest", "show", "web"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Errorf("guest show after delete = exit %d, %q; want not found", code, errOut)
	}
}

// TestAgentKillRestart: kill -9 the agent; guests keep running, and the
// restarted agent rediscovers them without restarting or duplicating any.
func TestAgentKillRestart(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1")
	for _, name := range []string{"g1", "g2"} {
		c.mustCLI("guest", "create", name, "--image", "busybox", "--memory", "64M", "--cpus", "0.1")
	}
	before := map[string]int{}
	for _, name := range []string{"g1", "g2"} {
		_, pid, err := a.lxc.info(name)
		if err != nil || pid == 0 {
			t.Fatalf("lxc-info %s = pid %d, %v", name, pid, err)
		}
		before[name] = pid
	}
	listBefore := a.lxc.list()

	a.kill()
	for name, pid := range before {
		if st, p, _ := a.lxc.info(name); st != "RUNNING" || p != pid {
			t.Fatalf("with the agent dead, %s = %s pid %d; want RUNNING pid %d", name, st, p, pid)
		}
	}
	c.restartAgent(a)
	// Let the restarted agent reconcile a few times.
	eventually(t, 30*time.Second, "agent reports again", func() error {
		if !strings.Contains(a.log.String(), "agent running") {
			return fmt.Errorf("agent not running yet")
		}
		return nil
	})
	time.Sleep(5 * time.Second) // two resync periods of 2s
	for name, pid := range before {
		if st, p, _ := a.lxc.info(name); st != "RUNNING" || p != pid {
			t.Errorf("after agent restart, %s = %s pid %d; want RUNNING pid %d (not restarted)", name, st, p, pid)
		}
		if v := c.guest(name); v.Status != "running" || v.Guest.Observed.Pid != strconv.Itoa(pid) {
			t.Errorf("after agent restart, guest show %s = %s pid %s; want running pid %d", name, v.Status, v.Guest.Observed.Pid, pid)
		}
	}
	if after := a.lxc.list(); !slices.Equal(after, listBefore) {
		t.Errorf("containers after restart = %v, want %v (nothing duplicated)", after, listBefore)
	}
}

// TestDriftRepaired: a container stopped or destroyed behind the agent's
// back is restarted or recreated by the next reconcile.
func TestDriftRepaired(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1")
	c.mustCLI("guest", "create", "drift", "--image", "busybox", "--memory", "64M", "--cpus", "0.1")
	_, pid0, _ := a.lxc.info("drift")

	if out, err := a.lxc.command("lxc-stop", "-n", "drift", "-k").CombinedOutput(); err != nil {
		t.Fatalf("lxc-stop: %v: %s", err, out)
	}
	var pid1 int
	eventually(t, 30*time.Second, "hand-stopped guest restarted", func() error {
		st, pid, err := a.lxc.info("drift")
		if err != nil || st != "RUNNING" || pid == pid0 {
			return fmt.Errorf("state %s pid %d (was %d): %v", st, pid, pid0, err)
		}
		pid1 = pid
		return nil
	})

	// The agent may restart the guest between lxc-destroy's own stop and
	// its destroy (it repairs drift too): try again until it is gone.
	eventually(t, 20*time.Second, "guest destroyed by hand", func() error {
		if out, err := a.lxc.command("lxc-destroy", "-n", "drift", "-f").CombinedOutput(); err != nil {
			return fmt.Errorf("lxc-destroy: %v: %s", err, out)
		}
		return nil
	})
	eventually(t, 30*time.Second, "hand-deleted guest recreated", func() error {
		st, pid, err := a.lxc.info("drift")
		if err != nil || st != "RUNNING" || pid == pid1 {
			return fmt.Errorf("state %s pid %d: %v", st, pid, err)
		}
		return nil
	})
	eventually(t, 10*time.Second, "status back to running", func() error {
		if v := c.guest("drift"); v.Status != "running" {
			return fmt.Errorf("guest is %v", v)
		}
		return nil
	})
}

// TestTwoAgentsOneHost: agents with their own state folders and lxcpaths
// share a host without seeing or touching each other's guests.
func TestTwoAgentsOneHost(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1", "--label", "zone=a")
	b := c.addAgent("n2", "--label", "zone=b")
	// Bin-packing would put both on one node; constraints split them.
	c.mustCLI("guest", "create", "ga", "--image", "busybox", "--memory", "1G", "--cpus", "0.1", "--constraint", "zone=a")
	c.mustCLI("guest", "create", "gb", "--image", "busybox", "--memory", "1G", "--cpus", "0.1", "--constraint", "zone=b")
	on := map[string]string{"ga": c.guest("ga").NodeName, "gb": c.guest("gb").NodeName}
	if on["ga"] != "n1" || on["gb"] != "n2" {
		t.Fatalf("guests on %v; want ga on n1 (zone a) and gb on n2 (zone b)", on)
	}
	for _, ag := range []*agentProc{a, b} {
		var mine []string
		for g, n := range on {
			if n == ag.name {
				mine = append(mine, g)
			}
		}
		got := guestContainers(ag.lxc)
		if !slices.Equal(got, mine) {
			t.Errorf("containers in %s's lxcpath = %v, want %v", ag.name, got, mine)
		}
	}
	// Several resyncs later, neither agent has removed the other's guest.
	time.Sleep(5 * time.Second)
	for g, n := range on {
		if st, _, err := c.agents[n].lxc.info(g); err != nil || st != "RUNNING" {
			t.Errorf("guest %s on %s = %s, %v; want RUNNING", g, n, st, err)
		}
	}
	var list struct {
		Guests []struct {
			NodeName string `json:"node_name"`
		} `json:"guests"`
	}
	if err := c.json(&list, "guest", "list", "--node", "n1"); err != nil || len(list.Guests) != 1 {
		t.Errorf("guest list --node n1 = %+v, %v; want one guest", list, err)
	}
}

// guestContainers lists the guest containers (not image caches) of an lxcpath.
func guestContainers(h lxcHost) []string {
	var out []string
	for _, n := range h.list() {
		if _, err := os.Stat(filepath.Join(h.path, n, "corpus.json")); err == nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// memoryLimit reads the memory limit of a process's cgroup (v1 or v2).
func memoryLimit(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case strings.Split(parts[1], ",")[0] == "memory" || slices.Contains(strings.Split(parts[1], ","), "memory"):
			file = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes")
		case parts[0] == "0" && parts[1] == "":
			file = filepath.Join("/sys/fs/cgroup", parts[2], "memory.max")
			if _, err := os.Stat(file); err != nil {
				continue
			}
		default:
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return 0, err
		}
		return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	return 0, fmt.Errorf("no memory cgroup for pid %d", pid)
}
