package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"corpus/netns/l2filter"
)

// TestGuestARPSpoofing: a guest that takes another guest's address and
// announces it with gratuitous ARP does not move the node's neighbour
// entry for it, and the proxy's requests still reach the other guest; a
// guest that changes its MAC is cut off until it takes its own back; a
// deleted guest's port leaves the node's layer-2 filter.
func TestGuestARPSpoofing(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1")
	client, nodeAddr := c.lab.addClient(a.node)
	hc := httpIn(client)
	for _, g := range []string{"victim", "attacker"} {
		c.mustCLI("guest", "create", g, "--image", "busybox", "--memory", "64M", "--cpus", "0.2")
		serveHTTP(t, c, g, g)
	}
	c.mustCLI("guest", "expose", "victim", "--proxy", "--domain", "victim.example.test", "--port", "80")
	throughProxy := wantBody(hc, "http://"+nodeAddr+"/", "victim.example.test", "victim")
	eventually(t, 15*time.Second, "the proxy to the victim", throughProxy)

	victim, attacker := guestAddress(t, c, "victim"), guestAddress(t, c, "attacker")
	victimMAC := strings.TrimSpace(c.mustCLI("guest", "exec", "victim", "--", "cat", "/sys/class/net/eth0/address"))
	attackerMAC := strings.TrimSpace(c.mustCLI("guest", "exec", "attacker", "--", "cat", "/sys/class/net/eth0/address"))
	if got := neighbour(t, a.node.ns, victim); got != victimMAC {
		t.Fatalf("before the attack, the node's neighbour entry for the victim %s = %q, want %s", victim, got, victimMAC)
	}

	// The attacker holds the victim's address and keeps announcing it,
	// as requests and as replies, while the node's proxy serves.
	before := l2State(t, a.node.ns).Dropped
	pid := strings.TrimSpace(c.mustCLI("guest", "exec", "attacker", "--", "sh", "-c",
		"ip addr add "+victim+"/32 dev eth0 && { while :; do arping -U -c 2 -I eth0 -s "+victim+" "+victim+"; arping -A -c 2 -I eth0 -s "+victim+" "+victim+"; done >/dev/null 2>&1 </dev/null & echo $!; }"))
	eventually(t, 10*time.Second, "the announcements to reach the node or its filter", func() error {
		if d := l2State(t, a.node.ns).Dropped - before; d < 4 && neighbour(t, a.node.ns, victim) == victimMAC {
			return fmt.Errorf("%d frames dropped", d)
		}
		return nil
	})
	for range 5 {
		if got := neighbour(t, a.node.ns, victim); got != victimMAC {
			t.Errorf("during the attack, the node's neighbour entry for the victim %s = %q, want the victim's %s (the attacker's is %s)", victim, got, victimMAC, attackerMAC)
		}
		if err := throughProxy(); err != nil {
			t.Errorf("during the attack: %v", err)
		}
	}
	c.mustCLI("guest", "exec", "attacker", "--", "kill", pid)

	// A new MAC, and the node's MAC set by hand (its ARP under the new
	// MAC is dropped too): the attacker reaches nothing, not even the
	// node's proxy, which it may reach under its own.
	bridgeMAC, err := exec.Command("ip", "netns", "exec", a.node.ns, "cat", "/sys/class/net/corpus0/address").Output()
	if err != nil {
		t.Fatal(err)
	}
	gw := strings.TrimSuffix(attacker, attacker[strings.LastIndex(attacker, "."):]) + ".1"
	// busybox's wget crashes with a timeout (-T); nc gives up by itself,
	// and keeps its side open while the proxy answers (a client that
	// closes is gone to it).
	viaProxy := []string{"guest", "exec", "attacker", "--", "sh", "-c",
		`{ printf 'GET / HTTP/1.0\r\nHost: victim.example.test\r\n\r\n'; sleep 3; } | nc -w 3 ` + gw + ` 80`}
	answered := func(out string) bool { return strings.HasSuffix(strings.TrimSpace(out), "\nvictim") }
	if out := c.mustCLI(viaProxy...); !answered(out) {
		t.Fatalf("the attacker under its own MAC through the node's proxy = %q, want victim's page", out)
	}
	c.mustCLI("guest", "exec", "attacker", "--", "sh", "-c",
		"ip link set eth0 address 02:de:ad:be:ef:01 && arp -i eth0 -s "+gw+" "+strings.TrimSpace(string(bridgeMAC)))
	if out, _, _ := c.cli(viaProxy...); strings.Contains(out, "HTTP/") {
		t.Errorf("the attacker under another MAC reached the node's proxy: %q", out)
	}
	c.mustCLI("guest", "exec", "attacker", "--", "sh", "-c", "ip link set eth0 address "+attackerMAC+" && { arp -i eth0 -d "+gw+" 2>/dev/null; true; }")
	eventually(t, 10*time.Second, "the attacker under its own MAC again", func() error {
		if out, errOut, code := c.cli(viaProxy...); !answered(out) {
			return fmt.Errorf("exit %d: %q %s", code, out, errOut)
		}
		return nil
	})
	if err := throughProxy(); err != nil {
		t.Errorf("after the MAC change: %v", err)
	}

	// Removed with the guest.
	port := "cg" + c.guest("attacker").Guest.ID[:12]
	if !hasPort(l2State(t, a.node.ns), port) {
		t.Fatalf("the node's filter lacks the attacker's port %s", port)
	}
	c.mustCLI("guest", "delete", "attacker")
	eventually(t, 30*time.Second, "the attacker's port out of the node's filter", func() error {
		if st := l2State(t, a.node.ns); hasPort(st, port) {
			return fmt.Errorf("ports %v", st.Ports)
		}
		return nil
	})
}

// neighbour is the MAC of addr in the neighbour table of namespace ns's
// bridge, "" when it has none.
func neighbour(t *testing.T, ns, addr string) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "neigh", "show", addr, "dev", "corpus0").Output()
	if err != nil {
		t.Fatalf("ip -n %s neigh show %s: %v", ns, addr, err)
	}
	f := strings.Fields(string(out))
	for i, w := range f {
		if w == "lladdr" && i+1 < len(f) {
			return f[i+1]
		}
	}
	return ""
}

// l2State is what the layer-2 filter holds in namespace ns.
func l2State(t *testing.T, ns string) l2filter.State {
	t.Helper()
	f, err := l2filter.New(l2filter.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := inNamespace(ns, func() (l2filter.State, error) { return f.Observed(context.Background()) })
	if err != nil {
		t.Fatalf("reading the layer-2 filter in %s: %v", ns, err)
	}
	return st
}

func hasPort(st l2filter.State, iface string) bool {
	for _, p := range st.Ports {
		if p.Iface == iface {
			return true
		}
	}
	return false
}
