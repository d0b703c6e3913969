package robustness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"

	"corpus/internal/testrun"
)

// lab is one run's network and disks:
//
//	r1 10.250.1.2 ─┐
//	r2 10.250.2.2 ─┼─ sw (routes; partitions are its FORWARD rules)
//	r3 10.250.3.2 ─┤
//	this process ──┘ 10.250.100.2 (the clients)
//
// sw also runs toxiproxy, with a proxy for each replica's Raft and API
// ports that faults route the leader's connections through.
// Every replica's data folder is a small ext4 file system on a loop
// device, so that one can fill up. Cleanup deletes the namespaces (and
// with them links, routes and rules) and unmounts the file systems,
// which frees their loop devices.
type lab struct {
	t      *testing.T
	prefix string
	sw     string
	ns     []string // the replicas' namespaces
	addr   []string // the replicas' addresses
	data   []string // the replicas' data folders (mount points)
	// toxi controls the toxiproxy server in sw (toxics_test.go), the
	// process toxiCmd.
	toxi    *toxiclient.Client
	toxiCmd *exec.Cmd
}

const (
	labNet     = "10.250"
	clientAddr = labNet + ".100.2"
	// dataSize is each replica's file system: room for the state, the
	// Raft log and snapshots of a run several times over.
	dataSize = "96M"
)

func newLab(t *testing.T, dir string, replicas int) *lab {
	t.Helper()
	l := &lab{t: t, prefix: fmt.Sprintf("crb%d", os.Getpid()%100000)}
	sweep(t)
	l.sw = l.addNS("sw")
	l.run("ip", "netns", "exec", l.sw, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	for i := 1; i <= replicas; i++ {
		ns := l.addNS(fmt.Sprintf("r%d", i))
		addr := fmt.Sprintf("%s.%d.2", labNet, i)
		l.run("ip", "link", "add", fmt.Sprintf("%s-%da", l.prefix, i), "netns", ns, "type", "veth", "peer", "name", fmt.Sprintf("%s-%db", l.prefix, i), "netns", l.sw)
		l.linkUp(ns, fmt.Sprintf("%s-%da", l.prefix, i), addr+"/24")
		l.linkUp(l.sw, fmt.Sprintf("%s-%db", l.prefix, i), fmt.Sprintf("%s.%d.1/24", labNet, i))
		l.run("ip", "-n", ns, "route", "add", labNet+".0.0/16", "via", fmt.Sprintf("%s.%d.1", labNet, i))
		l.ns = append(l.ns, ns)
		l.addr = append(l.addr, addr)
		l.data = append(l.data, l.disk(filepath.Join(dir, fmt.Sprintf("r%d", i))))
	}
	// This process's link: its end lives here, the other in sw; deleting
	// sw deletes both, and the route with them.
	host := l.prefix + "-h"
	l.run("ip", "link", "add", host+"a", "type", "veth", "peer", "name", host+"b", "netns", l.sw)
	t.Cleanup(func() { exec.Command("ip", "link", "del", host+"a").Run() })
	l.linkUp("", host+"a", clientAddr+"/24")
	l.linkUp(l.sw, host+"b", labNet+".100.1/24")
	l.run("ip", "route", "add", labNet+".0.0/16", "via", labNet+".100.1")
	l.startToxiproxy()
	return l
}

// sweep removes what a run killed before its cleanup left (namespaces,
// this process's link and route, loop-mounted data folders): one run at
// a time holds this subnet and these names.
func sweep(t *testing.T) {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "crb") {
			t.Logf("removing namespace %s, left by an interrupted run", f[0])
			exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(links), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], "crb") {
			exec.Command("ip", "link", "del", strings.Split(strings.TrimSuffix(f[1], ":"), "@")[0]).Run()
		}
	}
	exec.Command("ip", "route", "del", labNet+".0.0/16").Run()
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.Contains(f[4], "/TestRobustness") && filepath.Dir(f[4]) != "" {
			if b, err := filepath.Match("r[0-9]", filepath.Base(f[4])); err == nil && b {
				t.Logf("unmounting %s, left by an interrupted run", f[4])
				exec.Command("umount", "-l", f[4]).Run()
			}
		}
	}
}

func (l *lab) addNS(name string) string {
	ns := l.prefix + "-" + name
	l.run("ip", "netns", "add", ns)
	testrun.Made("netns", ns)
	l.t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	l.run("ip", "-n", ns, "link", "set", "lo", "up")
	return ns
}

func (l *lab) linkUp(ns, dev, addr string) {
	ip := []string{"ip"}
	if ns != "" {
		ip = append(ip, "-n", ns)
	}
	l.run(append(ip, "addr", "add", addr, "dev", dev)...)
	l.run(append(ip, "link", "set", dev, "up")...)
}

// disk makes dir a mount of a fresh dataSize ext4 image beside it.
func (l *lab) disk(dir string) string {
	img := dir + ".img"
	l.run("truncate", "-s", dataSize, img)
	// -m 0: no blocks reserved for root, which the replicas run as, so
	// full is full for them too.
	l.run("mkfs.ext4", "-q", "-F", "-m", "0", img)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		l.t.Fatal(err)
	}
	l.run("mount", "-o", "loop", img, dir)
	l.t.Cleanup(func() {
		// Lazy: a replica killed a moment ago may still hold a file.
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			l.t.Logf("umount %s: %v: %s", dir, err, out)
		}
		os.Remove(img)
	})
	return dir
}

func (l *lab) run(args ...string) {
	l.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		l.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// cut drops what replica a sends to replica b (indexes into ns), in sw.
func (l *lab) cut(a, b int) {
	l.run("ip", "netns", "exec", l.sw, "iptables", "-w", "-I", "FORWARD",
		"-s", l.addr[a], "-d", l.addr[b], "-j", "DROP")
}

// isolate cuts both ways between every replica of side and every other.
func (l *lab) isolate(side ...int) {
	for _, a := range side {
		for b := range l.ns {
			if !slices.Contains(side, b) {
				l.cut(a, b)
				l.cut(b, a)
			}
		}
	}
}

// heal removes every partition.
func (l *lab) heal() {
	l.run("ip", "netns", "exec", l.sw, "iptables", "-w", "-F", "FORWARD")
}

// fill takes the free space of replica i's file system; unfill gives
// it back.
func (l *lab) fill(i int) {
	f := filepath.Join(l.data[i], "filler")
	// dd stops at ENOSPC, which is the point.
	exec.Command("dd", "if=/dev/zero", "of="+f, "bs=1M").Run()
	exec.Command("sync", "-f", f).Run()
}

func (l *lab) unfill(i int) {
	os.Remove(filepath.Join(l.data[i], "filler"))
}
