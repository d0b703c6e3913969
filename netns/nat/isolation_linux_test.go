package nat_test

import (
	"net/netip"
	"testing"

	"corpus/netns/nat"
)

// TestGuestIsolation: guests on one bridge reach each other only inside
// a group, reach the node only on its node ports, and never reach a
// blocked endpoint; published ports and the way out keep working.
func TestGuestIsolation(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	// The node's own services: a "proxy" guests may use, an "agent" they
	// may not.
	serveTCP(t, tp.node, "proxy", gw+":80")
	serveTCP(t, tp.node, "agent", ":7402")
	d := tp.desired
	d.NodePorts = []nat.NodePort{{Proto: "tcp", Port: 80}}
	tp.apply(t, d)
	apart := []path{
		{"guest to guest directly, no group", (*topo).g1NS, "tcp4", "10.210.3.3:80", "", ""},
		{"guest to guest, other way", (*topo).g2NS, "tcp4", "10.210.3.2:80", "", ""},
		{"guest to a published port of another guest", (*topo).g1NS, "tcp4", node + ":8081", "guest2", gw},
		{"guest to the node's proxy", (*topo).g1NS, "tcp4", gw + ":80", "proxy", "10.210.3.2"},
		{"guest to the node's agent", (*topo).g1NS, "tcp4", gw + ":7402", "", ""},
		{"guest to the agent on the node's other address", (*topo).g1NS, "tcp4", node + ":7402", "", ""},
		{"client to the node's agent", (*topo).clientNS, "tcp4", node + ":7402", "agent", "10.99.0.2"},
		{"guest to the outside", (*topo).g1NS, "tcp4", "10.99.0.2:9000", "client", node},
	}
	checkPaths(t, tp, apart)

	d.Groups = [][]netip.Addr{{guest1, guest2}}
	d.Blocked = []netip.AddrPort{netip.MustParseAddrPort("10.99.0.2:9000")}
	tp.apply(t, d)
	checkPaths(t, tp, []path{
		{"guests of one group", (*topo).g1NS, "tcp4", "10.210.3.3:80", "guest2", "10.210.3.2"},
		{"guests of one group, other way", (*topo).g2NS, "tcp4", "10.210.3.2:80", "guest1", "10.210.3.3"},
		{"guest to a blocked endpoint", (*topo).g1NS, "tcp4", "10.99.0.2:9000", "", ""},
		{"client to guest through DNAT", (*topo).clientNS, "tcp4", node + ":8080", "guest1", "10.99.0.2"},
	})
}

// TestSealedGuest: a sealed guest (a service's) is reached on its port by
// the addresses it names only: not by a guest of its own group, not
// through a port published to it, and by a named guest only on that
// port.
func TestSealedGuest(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	d := tp.desired
	d.Groups = [][]netip.Addr{{guest1, guest2}}
	d.Sealed = []nat.Sealed{{Addr: guest2, Port: 80}}
	tp.apply(t, d)
	checkPaths(t, tp, []path{
		{"a guest of its group, not named", (*topo).g1NS, "tcp4", "10.210.3.3:80", "", ""},
		{"a client through its published port", (*topo).clientNS, "tcp4", node + ":8081", "", ""},
		{"the sealed guest out to another guest of its group", (*topo).g2NS, "tcp4", "10.210.3.2:80", "guest1", "10.210.3.3"},
		{"a client to another guest's published port", (*topo).clientNS, "tcp4", node + ":8080", "guest1", "10.99.0.2"},
	})
	d.Groups = nil
	d.Sealed = []nat.Sealed{{Addr: guest2, Port: 80, From: []netip.Addr{guest1}}}
	tp.apply(t, d)
	checkPaths(t, tp, []path{
		{"the named guest", (*topo).g1NS, "tcp4", "10.210.3.3:80", "guest2", "10.210.3.2"},
		{"a client through its published port", (*topo).clientNS, "tcp4", node + ":8081", "", ""},
	})
	if p := tp.plan(t, d); !p.Empty() {
		t.Errorf("Plan after applying sealed guests = %v\n%s\nwant empty: the rules differ from what iptables-save shows", p, p.Restore)
	}
	d.Sealed = []nat.Sealed{{Addr: guest2, Port: 81, From: []netip.Addr{guest1}}}
	tp.apply(t, d)
	checkPaths(t, tp, []path{
		{"the named guest on another port", (*topo).g1NS, "tcp4", "10.210.3.3:80", "", ""},
	})
}
