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

	"golang.org/x/sys/unix"

	"corpus/internal/cgroupfile"
	"corpus/netns/l2filter"
)

// breakoutChecks are what a dev with one granted project tries from
// inside its guest to get out of it. Each prints "escaped" only when
// the attempt worked.
func breakoutChecks(hostDisk, agentAddr, otherGuest string) [][2]string {
	return [][2]string{
		{"mount the host disk", fmt.Sprintf("mknod /tmp/disk b %s && mkdir -p /tmp/host && mount /tmp/disk /tmp/host && touch /tmp/host/corpus-breakout && echo escaped", hostDisk)},
		{"mknod /dev/mem", "mknod /tmp/mem c 1 1 && head -c 1 /tmp/mem >/dev/null && echo escaped"},
		{"write /proc/sysrq-trigger", "echo h > /proc/sysrq-trigger && echo escaped"},
		{"load a module", "cp /bin/busybox /tmp/m.ko; insmod /tmp/m.ko 2>&1 | grep -qv 'not permitted' && echo escaped"},
		{"reach the agent API", fmt.Sprintf("nc -w 2 %s </dev/null && echo escaped", strings.Replace(agentAddr, ":", " ", 1))},
		{"reach the git port", fmt.Sprintf("nc -w 2 %s 2222 </dev/null && echo escaped", strings.Split(agentAddr, ":")[0])},
		{"reach another project guest", fmt.Sprintf("nc -w 2 %s 80 </dev/null && echo escaped", otherGuest)},
	}
}

// TestBreakoutCatalogue runs the catalogue as a granted dev, through a
// git push's install step and through exec, plus fork, memory and disk
// bombs, and checks from the host that nothing got out.
func TestBreakoutCatalogue(t *testing.T) {
	l := newDeployLab(t)
	c := l.c
	// Another project's guest on the same node, serving on port 80.
	c.mustCLI("project", "create", "other", "--env", "dev", "--image", "busybox", "--memory", "64M", "--cpus", "0.2")
	var other guestView
	eventually(t, 60*time.Second, "other-dev running", func() error {
		other = c.guest("other-dev")
		if other.Guest.Observed.State != "running" {
			return fmt.Errorf("state %q", other.Guest.Observed.State)
		}
		return nil
	})
	c.mustCLI("guest", "exec", "other-dev", "--", "sh", "-c", "nc -ll -p 80 -e echo hi </dev/null >/dev/null 2>&1 &")

	var root unix.Stat_t
	if err := unix.Stat("/", &root); err != nil {
		t.Fatal(err)
	}
	hostDisk := fmt.Sprintf("%d %d", unix.Major(root.Dev), unix.Minor(root.Dev))
	otherAddr := guestAddress(t, c, "other-dev")
	checks := breakoutChecks(hostDisk, l.a.apiAddr, otherAddr)
	// The check that the other guest answers at all, so "no answer"
	// above means refused.
	if out := c.mustCLI("guest", "exec", "other-dev", "--", "sh", "-c", "nc -w 2 127.0.0.1 80 </dev/null"); !strings.Contains(out, "hi") {
		t.Fatalf("the other project's guest does not serve: %q", out)
	}

	// Through a push: the install step runs every check.
	var script strings.Builder
	script.WriteString("#!/bin/sh\n")
	for _, ch := range checks {
		fmt.Fprintf(&script, "if (%s) 2>/dev/null | grep -q escaped; then echo 'BREAKOUT %s: escaped'; else echo 'BREAKOUT %s: refused'; fi\n", ch[1], ch[0], ch[0])
	}
	l.commitSite("one")
	l.write(".corpus/install.d/05-breakout", script.String(), 0o755)
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "try to get out")
	out := l.mustPush()
	for _, ch := range checks {
		if !strings.Contains(out, "BREAKOUT "+ch[0]+": refused") {
			t.Errorf("through a push, %q was not refused:\n%s", ch[0], grepLines(out, "BREAKOUT"))
		}
	}

	// Through exec, as alice.
	tok := struct {
		Token string `json:"token"`
	}{}
	if err := c.json(&tok, "user", "token", "create", "alice", "--ttl", "1h"); err != nil {
		t.Fatal(err)
	}
	as := func(args ...string) (string, string, int) {
		return c.cliIn(c.lab.ctl, []string{"XDG_CONFIG_HOME=" + filepath.Join(c.dir, "alice-cfg"), "CORPUS_ENV=", "CORPUS_ADDR=", "CORPUS_TOKEN=", "CORPUS_CA_CERT="},
			append([]string{"--address", c.api, "--token", tok.Token, "--ca-cert", c.ca}, args...)...)
	}
	for _, ch := range checks {
		out, errOut, _ := as("guest", "exec", "hello-dev", "--", "sh", "-c", "("+ch[1]+") 2>&1")
		if strings.Contains(out, "escaped") {
			t.Errorf("through exec as alice, %q escaped: %s %s", ch[0], out, errOut)
		}
	}
	if _, errOut, code := as("guest", "exec", "other-dev", "--", "true"); code == 0 {
		t.Errorf("alice ran a command in another project's guest: %s", errOut)
	}

	// Bombs: each stays inside the guest's limits and the node carries
	// on. The disk first: it leaves the guest running. What the host
	// gives the guest is its disk image's blocks (the host's free space
	// would count other test processes' writes too).
	out, _, _ = as("guest", "exec", "hello-dev", "--", "sh", "-c", "dd if=/dev/zero of=/bomb bs=1M count=1500 2>&1; sync")
	if !strings.Contains(out, "No space left") {
		t.Errorf("writing 1.5 GiB into a guest with a 1 GiB disk: %q, want ENOSPC", out)
	}
	img := filepath.Join(l.a.lxc.path, ".disks", "hello-dev.img")
	var st unix.Stat_t
	if err := unix.Stat(img, &st); err != nil {
		t.Fatalf("the guest's disk image: %v", err)
	}
	if used := st.Blocks * 512; used > 1100<<20 || used < 900<<20 {
		t.Errorf("the guest's disk image %s holds %d MiB after the guest filled a 1 GiB disk; want about 1024", img, used>>20)
	}
	if out, _, code := as("guest", "exec", "hello-dev", "--", "rm", "/bomb"); code != 0 {
		t.Errorf("removing the file that filled the disk: %d %s", code, out)
	}
	// Memory, then processes: the kernel stops them at the guest's
	// limits (its OOM killer may take the guest's init too; corpus then
	// starts the guest again).
	pid := guestPID(t, c, "hello-dev")
	as("guest", "exec", "hello-dev", "--", "sh", "-c", "head -c 300000000 /dev/zero | tr '\\0' a | sort >/dev/null")
	// The bomb's processes end by themselves: with the cap reached, not
	// even an exec can start in the guest until they do.
	as("guest", "exec", "hello-dev", "--", "sh", "-c", "i=0; while [ $i -lt 6000 ]; do sleep 15 </dev/null >/dev/null 2>&1 & i=$((i+1)); done 2>/dev/null; true")
	if n, err := cgroupfile.Read(pid, "pids", "pids.current"); err == nil {
		if v, _ := strconv.Atoi(n); v > 4096+16 {
			t.Errorf("a fork bomb made %d processes, over the guest's cap", v)
		}
	}
	eventually(t, 90*time.Second, "hello-dev answering after the bombs", func() error {
		if out, errOut, code := as("guest", "exec", "hello-dev", "--", "echo", "alive"); code != 0 || out != "alive\n" {
			return fmt.Errorf("exec: %d %q %s", code, out, errOut)
		}
		return nil
	})

	// A guest's packets may carry its own address only (the spoofing
	// itself is tested in netns/l2filter): the node's layer-2 filter
	// binds each guest's port to its address.
	l2 := l2State(t, l.a.node.ns)
	for _, g := range []string{"hello-dev", "other-dev"} {
		addr := guestAddress(t, c, g)
		if !slices.ContainsFunc(l2.Ports, func(p l2filter.Port) bool { return p.Addr.String() == addr && strings.HasPrefix(p.Iface, "cg") }) {
			t.Errorf("the node's layer-2 filter lacks the address binding of %s (%s): %+v", g, addr, l2.Ports)
		}
	}

	// Checked from the host: nothing written there, and every exec of
	// alice's in the audit log.
	if _, err := os.Stat("/corpus-breakout"); err == nil {
		t.Error("a guest wrote /corpus-breakout on the host")
	}
	var audit struct {
		Entries []struct {
			Actor, Action, Target string
		} `json:"entries"`
	}
	if err := c.json(&audit, "audit", "--action", "exec_guest", "--limit", "1000"); err != nil {
		t.Fatal(err)
	}
	execs := 0
	for _, e := range audit.Entries {
		if e.Actor == "user:alice" && e.Target == "hello-dev" {
			execs++
		}
	}
	if want := len(checks) + 5; execs < want {
		t.Errorf("the audit log holds %d execs of alice in hello-dev, want at least %d", execs, want)
	}
}

// guestAddress is a guest's address on its node's network.
func guestAddress(t *testing.T, c *cluster, name string) string {
	t.Helper()
	var v struct {
		Guest struct {
			Address string `json:"address"`
		} `json:"guest"`
	}
	if err := c.json(&v, "guest", "show", name); err != nil {
		t.Fatal(err)
	}
	return v.Guest.Address
}

// guestPID is the host PID of a guest's init.
func guestPID(t *testing.T, c *cluster, name string) int {
	t.Helper()
	var pid int
	if _, err := fmt.Sscan(c.guest(name).Guest.Observed.Pid, &pid); err != nil {
		t.Fatalf("guest %s has no PID: %v", name, err)
	}
	return pid
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
