package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"corpus/internal/testrun"
)

// netLab is the network of one test, made of namespaces it creates:
//
//	     ctl (coordinator and CLI; 127.0.0.1:7400; 10.K.0.1 for gossip)
//	    /   \   10.K.J.1 ─ 10.K.J.2, one link per node
//	node1   node2 ...   (an agent each: its bridge, NAT, proxy, guests)
//	  |  10.K.1JJ.1 ─ 10.K.1JJ.2
//	client (outside traffic to node1)
//
// ctl routes between the node links (10.K.0.0/16), so nodes reach each
// other as on a LAN: their gossip members probe one another. Every
// address lives in a namespace the test made; deleting the namespaces
// (the test's cleanup) removes their links, bridges and rules.
type netLab struct {
	t      *testing.T
	prefix string
	k      int
	ctl    string
	// lan is ctl's own address, on its loopback, that every node reaches.
	lan   string
	nodes int
}

// labNode is a node namespace.
type labNode struct {
	ns      string
	addr    string // the node's address on its link to ctl
	ctlSide string // ctl's address on that link
	ctlLink string // ctl's end of that link
	j       int
}

var labSeq atomic.Int32

func newNetLab(t *testing.T) *netLab {
	t.Helper()
	requireE2E(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (ip) to build test namespaces")
	}
	k := 100 + int(labSeq.Add(1))
	l := &netLab{t: t, k: k, prefix: fmt.Sprintf("ce%d-%d", os.Getpid()%10000, k)}
	l.ctl = l.addNS("ctl")
	l.lan = fmt.Sprintf("10.%d.0.1", k)
	l.ip("-n", l.ctl, "addr", "add", l.lan+"/32", "dev", "lo")
	if out, err := exec.Command("ip", "netns", "exec", l.ctl, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		t.Fatalf("enabling forwarding in %s: %v: %s", l.ctl, err, out)
	}
	return l
}

func (l *netLab) addNS(suffix string) string {
	l.t.Helper()
	ns := l.prefix + "-" + suffix
	l.ip("netns", "add", ns)
	testrun.Made("netns", ns)
	l.t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	l.ip("-n", ns, "link", "set", "lo", "up")
	return ns
}

// addNode makes a node namespace linked to ctl.
func (l *netLab) addNode(name string) *labNode {
	l.t.Helper()
	l.nodes++
	j := l.nodes
	link := fmt.Sprintf("v%d%d", l.k, j)
	n := &labNode{ns: l.addNS(name), j: j, ctlLink: link + "a",
		ctlSide: fmt.Sprintf("10.%d.%d.1", l.k, j), addr: fmt.Sprintf("10.%d.%d.2", l.k, j)}
	l.veth(l.ctl, n.ctlSide+"/24", n.ns, n.addr+"/24", link)
	l.ip("-n", n.ns, "route", "add", fmt.Sprintf("10.%d.0.0/16", l.k), "via", n.ctlSide)
	return n
}

// partitionRules drop everything that crosses a node's link in ctl: to
// and from ctl itself, and forwarded to and from the other nodes.
func partitionRules(n *labNode) [][]string {
	return [][]string{
		{"INPUT", "-i", n.ctlLink, "-j", "DROP"},
		{"OUTPUT", "-o", n.ctlLink, "-j", "DROP"},
		{"FORWARD", "-i", n.ctlLink, "-j", "DROP"},
		{"FORWARD", "-o", n.ctlLink, "-j", "DROP"},
	}
}

// partition cuts node n off from the coordinator and the other nodes
// (iptables DROP on its link, in ctl); heal undoes it. The node keeps
// running, unreachable, as behind a failed switch port.
func (l *netLab) partition(n *labNode) {
	l.t.Helper()
	for _, r := range partitionRules(n) {
		l.iptables(append([]string{"-I"}, r...)...)
	}
}

func (l *netLab) heal(n *labNode) {
	l.t.Helper()
	for _, r := range partitionRules(n) {
		l.iptables(append([]string{"-D"}, r...)...)
	}
}

func (l *netLab) iptables(args ...string) {
	l.t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", l.ctl, "iptables", "-w"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("iptables %s in %s: %v: %s", strings.Join(args, " "), l.ctl, err, out)
	}
}

// addClient makes a client namespace linked to a node; it returns the
// client's namespace and the node's address on that link.
func (l *netLab) addClient(n *labNode) (ns, nodeAddr string) {
	l.t.Helper()
	ns = l.addNS("cl" + fmt.Sprint(n.j))
	nodeAddr = fmt.Sprintf("10.%d.%d.1", l.k, 100+n.j)
	l.veth(n.ns, nodeAddr+"/24", ns, fmt.Sprintf("10.%d.%d.2/24", l.k, 100+n.j), fmt.Sprintf("w%d%d", l.k, n.j))
	l.ip("-n", ns, "route", "add", "default", "via", nodeAddr)
	return ns, nodeAddr
}

func (l *netLab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// veth links two namespaces with one address on each end.
func (l *netLab) veth(nsA, addrA, nsB, addrB, name string) {
	l.ip("link", "add", name+"a", "netns", nsA, "type", "veth", "peer", "name", name+"b", "netns", nsB)
	l.ip("-n", nsA, "addr", "add", addrA, "dev", name+"a")
	l.ip("-n", nsB, "addr", "add", addrB, "dev", name+"b")
	l.ip("-n", nsA, "link", "set", name+"a", "up")
	l.ip("-n", nsB, "link", "set", name+"b", "up")
}

// routeGuestSubnets routes each node's guest subnet to it in ctl, as the
// network between real nodes would (nodes on one LAN need nothing: each
// agent routes the others' subnets to their addresses).
func (l *netLab) routeGuestSubnets(c *cluster) {
	l.t.Helper()
	for _, a := range c.agents {
		var n struct {
			Node struct {
				Node struct {
					GuestSubnet string `json:"guest_subnet"`
				} `json:"node"`
			} `json:"node"`
		}
		if err := c.json(&n, "node", "show", a.name); err != nil || n.Node.Node.GuestSubnet == "" {
			l.t.Fatalf("node show %s: %v %+v", a.name, err, n)
		}
		l.ip("-n", l.ctl, "route", "replace", n.Node.Node.GuestSubnet, "via", a.node.addr)
	}
}
