package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGuestIDRanges: two guests on one node run in id ranges of their
// own, disjoint (their init's uid_map), and what is in their root file
// systems and volumes belongs to their range on the host; the ranges
// stay what they were across an agent and a coordinator restart; a
// deleted guest's range goes to the next guest; guests moved to another
// node by a drain get ranges there.
func TestGuestIDRanges(t *testing.T) {
	c := newCluster(t)
	n1 := c.addAgent("n1")
	start := rootSubordinate(t)
	c.mustCLI("guest", "create", "a", "--image", "busybox", "--memory", "64M", "--cpus", "0.1", "--volume", "64M")
	c.mustCLI("guest", "create", "b", "--image", "busybox", "--memory", "64M", "--cpus", "0.1")
	ranges, pids := map[string]uint32{}, map[string]int{}
	for _, g := range []string{"a", "b"} {
		ranges[g] = c.guest(g).Guest.IDRange
		pids[g] = checkOwnRange(t, c, n1, g, start)
	}
	if ranges["a"] == 0 || ranges["b"] == 0 || ranges["a"] == ranges["b"] {
		t.Fatalf("id ranges of a and b = %d and %d, want two of their own", ranges["a"], ranges["b"])
	}
	c.mustCLI("guest", "exec", "a", "--", "sh", "-c", "echo v > /srv/data/f")
	if uid := hostOwner(t, pids["a"], "/srv/data/f"); uid != rangeBase(start, ranges["a"]) {
		t.Errorf("a's volume file belongs to host uid %d, want its range's %d", uid, rangeBase(start, ranges["a"]))
	}

	// Restarts change nothing: same ranges, same guests running.
	n1.kill()
	c.restartAgent(n1)
	c.coord = c.coord.restart(t)
	c.waitReady()
	eventually(t, 30*time.Second, "agent back", func() error {
		if !strings.Contains(n1.log.String(), "agent running") {
			return fmt.Errorf("restarted agent not running yet")
		}
		return nil
	})
	for _, g := range []string{"a", "b"} {
		v := c.guest(g)
		_, pid, err := n1.lxc.info(g)
		if v.Guest.IDRange != ranges[g] || err != nil || pid != pids[g] {
			t.Errorf("after the restarts %s has range %d, pid %d (%v); want range %d, pid %d", g, v.Guest.IDRange, pid, err, ranges[g], pids[g])
		}
	}

	// a's range goes to the next guest once a is gone.
	c.mustCLI("guest", "delete", "a", "--purge")
	eventually(t, 30*time.Second, "a gone", func() error {
		if _, _, code := c.cli("guest", "show", "a"); code == 0 {
			return fmt.Errorf("guest a still listed")
		}
		return nil
	})
	c.mustCLI("guest", "create", "c", "--image", "busybox", "--memory", "64M", "--cpus", "0.1")
	if got := c.guest("c").Guest.IDRange; got != ranges["a"] {
		t.Errorf("range of c = %d, want a's %d (the lowest free)", got, ranges["a"])
	}
	checkOwnRange(t, c, n1, "c", start)

	// A drain moves b and c to n2, each into a range of n2's.
	n2 := c.addAgent("n2")
	out, errOut, code := c.cli("node", "mode", "n1", "drain", "--deadline", "3m")
	if code != 0 || !strings.Contains(out, "node n1 is drained") {
		t.Fatalf("node mode n1 drain = exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	moved := map[uint32]string{}
	for _, g := range []string{"b", "c"} {
		v := c.guest(g)
		if v.NodeName != "n2" || v.Guest.IDRange == 0 || moved[v.Guest.IDRange] != "" {
			t.Errorf("after the drain %s is on %s with range %d (others: %v), want on n2 with one of its own", g, v.NodeName, v.Guest.IDRange, moved)
		}
		moved[v.Guest.IDRange] = g
		checkOwnRange(t, c, n2, g, start)
	}
}

// TestGuestMovesToOwnRange: a guest placed while its node offered no
// ranges (the agent predates them; here root's subordinate ids hold one)
// shares range 0; once its node offers ranges it is given one and keeps
// running as it is, and at its next start it runs in that range with
// its files, on its root file system and volume, moved to it.
func TestGuestMovesToOwnRange(t *testing.T) {
	c := newCluster(t)
	start := rootSubordinate(t)
	dir := tempDir(t)
	one := fmt.Sprintf("root:%d:65536\n", start)
	for _, f := range []string{"subuid", "subgid"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(one), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := c.addAgentEnv("n1", []string{"CORPUS_LXC_SUBUID=" + filepath.Join(dir, "subuid"), "CORPUS_LXC_SUBGID=" + filepath.Join(dir, "subgid")})
	c.mustCLI("guest", "create", "old", "--image", "busybox", "--memory", "64M", "--cpus", "0.1", "--volume", "64M")
	if r := c.guest("old").Guest.IDRange; r != 0 {
		t.Fatalf("range of a guest on a node without ranges = %d, want 0 (shared)", r)
	}
	pid := checkOwnRange(t, c, a, "old", start)
	c.mustCLI("guest", "exec", "old", "--", "sh", "-c", "echo kept > /root/note && echo v > /srv/data/f && chown 1000 /srv/data/f")

	// The agent again, with the host's own subordinate ids.
	a.kill()
	c.restartAgent(a)
	var r uint32
	eventually(t, 30*time.Second, "old given a range", func() error {
		if r = c.guest("old").Guest.IDRange; r == 0 {
			return fmt.Errorf("old still has none")
		}
		return nil
	})
	time.Sleep(3 * time.Second) // a resync or so: nothing restarts it
	if _, p, err := a.lxc.info("old"); err != nil || p != pid || uidMapBase(t, p) != start {
		t.Fatalf("old after it was given range %d: pid %d (%v), want %d still in the shared range", r, p, err, pid)
	}

	c.mustCLI("guest", "stop", "old")
	c.mustCLI("guest", "start", "old")
	pid = checkOwnRange(t, c, a, "old", start)
	if base := uidMapBase(t, pid); base != rangeBase(start, r) {
		t.Errorf("old restarted in ids from %d, want range %d's %d", base, r, rangeBase(start, r))
	}
	if out := c.mustCLI("guest", "exec", "old", "--", "sh", "-c", "cat /root/note && echo more >> /srv/data/f && stat -c %u /srv/data/f"); out != "kept\n1000\n" {
		t.Errorf("old's files after the move = %q, want its note and volume file (uid 1000) kept and writable", out)
	}
	for path, want := range map[string]int64{"/root/note": rangeBase(start, r), "/srv/data/f": rangeBase(start, r) + 1000} {
		if uid := hostOwner(t, pid, path); uid != want {
			t.Errorf("%s of old belongs to host uid %d after the move, want %d", path, uid, want)
		}
	}
}

// checkOwnRange checks that guest g runs on node a in the id range
// guest show gives it (0: the shared one), that a file it writes and an
// image file belong to that range on the host, and returns its init PID.
func checkOwnRange(t *testing.T, c *cluster, a *agentProc, g string, start int64) int {
	t.Helper()
	v := c.guest(g)
	st, pid, err := a.lxc.info(g)
	if err != nil || st != "RUNNING" {
		t.Fatalf("guest %s on %s = %s, %v; want RUNNING", g, a.name, st, err)
	}
	want := rangeBase(start, v.Guest.IDRange)
	if base := uidMapBase(t, pid); base != want {
		t.Errorf("uid_map of %s's init maps from %d, want %d (range %d)", g, base, want, v.Guest.IDRange)
	}
	c.mustCLI("guest", "exec", g, "--", "sh", "-c", "echo x > /root/mine")
	for _, p := range []string{"/root/mine", "/bin/busybox"} {
		if uid := hostOwner(t, pid, p); uid != want {
			t.Errorf("%s of %s belongs to host uid %d, want %d", p, g, uid, want)
		}
	}
	return pid
}

// rangeBase is the first host id of id range r.
func rangeBase(start int64, r uint32) int64 { return start + int64(r)*65536 }

// rootSubordinate is the start of root's first range of 65,536 ids or
// more in /etc/subuid, which the agents' guests' ranges come from.
func rootSubordinate(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/etc/subuid")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(p) != 3 || p[0] != "root" {
			continue
		}
		start, err1 := strconv.ParseInt(p[1], 10, 64)
		count, err2 := strconv.ParseInt(p[2], 10, 64)
		if err1 == nil && err2 == nil && count >= 65536*16 {
			return start
		}
	}
	t.Fatal("/etc/subuid has no range of root for 16 guests (an agent adds root:1000000:1000000000 where root has none)")
	return 0
}

// uidMapBase is the host uid pid's user namespace maps its uid 0 to.
func uidMapBase(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 3 || f[0] != "0" || f[2] != "65536" {
		t.Fatalf("uid_map of %d = %q, want one range of 65536 ids", pid, b)
	}
	base, _ := strconv.ParseInt(f[1], 10, 64)
	return base
}

// hostOwner is the host uid owning path as process pid sees it (through
// its root, from the host's user namespace).
func hostOwner(t *testing.T, pid int, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(fmt.Sprintf("/proc/%d/root%s", pid, path), &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Uid)
}
