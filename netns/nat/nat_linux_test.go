package nat_test

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"corpus/internal/testrun"
	"corpus/netns"
	"corpus/netns/internal/nftconn"
	"corpus/netns/internal/nstest"
	"corpus/netns/nat"
)

var (
	clientAddr = netip.MustParsePrefix("10.99.0.2/24")
	nodeAddr   = netip.MustParsePrefix("10.99.0.1/24")
	gateway    = netip.MustParsePrefix("10.210.3.1/24")
	guest1     = netip.MustParseAddr("10.210.3.2")
	guest2     = netip.MustParseAddr("10.210.3.3")
	node       = nodeAddr.Addr().String()
	gw         = gateway.Addr().String()
)

// topo is a node namespace with a bridge and two guests on it, and a
// client namespace joined to the node by a veth:
//
//	client 10.99.0.2 ── up0 10.99.0.1 [node] br0 10.210.3.1 ─┬─ vg1 ── guest1 10.210.3.2
//	                                                         └─ vg2 ── guest2 10.210.3.3
//
// Each guest serves "<name> <remote addr>" on tcp/80 and udp/53; the
// client does the same on tcp/9000.
type topo struct {
	client, node, g1, g2 *nstest.NS
	nat                  *nat.NAT
	desired              nat.Desired
}

func newTopo(t *testing.T) *topo {
	t.Helper()
	nstest.RequireRoot(t)
	nstest.RequireIptables(t)
	tp := &topo{
		client: nstest.New(t, "client"),
		node:   nstest.New(t, "node"),
		g1:     nstest.New(t, "g1"),
		g2:     nstest.New(t, "g2"),
	}
	nstest.Veth(t, tp.client, "eth0", clientAddr, tp.node, "up0", nodeAddr)
	host := netns.New(netns.Config{Logger: nstest.Logger(t)})
	br := netns.Bridge{Name: "br0", Gateway: gateway}
	tp.node.MustDo(func() error { _, err := host.EnsureBridge(context.Background(), br); return err })
	for i, g := range []struct {
		ns   *nstest.NS
		addr netip.Addr
	}{{tp.g1, guest1}, {tp.g2, guest2}} {
		v := netns.Veth{Name: fmt.Sprintf("vg%d", i+1), Peer: "eth0", Bridge: br.Name, PeerNS: g.ns.Path}
		tp.node.MustDo(func() error { _, err := host.EnsureVeth(context.Background(), v); return err })
		g.ns.Iface("eth0", netip.PrefixFrom(g.addr, 24), gateway.Addr())
	}
	serve(t, tp.g1, "guest1")
	serve(t, tp.g2, "guest2")
	serveTCP(t, tp.client, "client", ":9000")

	n, err := nat.New(nat.Config{Logger: nstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	tp.nat = n
	tp.desired = nat.Desired{
		Subnets: []netip.Prefix{gateway.Masked()},
		Bridge:  br.Name,
		Forwards: []nat.Forward{
			{Proto: "tcp", HostPort: 8080, GuestAddr: guest1, GuestPort: 80},
			{Proto: "tcp", HostPort: 8081, GuestAddr: guest2, GuestPort: 80},
			{Proto: "tcp", HostPort: 8082, HostAddr: nodeAddr.Addr(), GuestAddr: guest2, GuestPort: 80},
			{Proto: "udp", HostPort: 5353, GuestAddr: guest1, GuestPort: 53},
		},
	}
	return tp
}

func (tp *topo) apply(t *testing.T, d nat.Desired) {
	t.Helper()
	tp.node.MustDo(func() error { return tp.nat.Apply(context.Background(), d) })
}

func (tp *topo) plan(t *testing.T, d nat.Desired) *nat.Plan {
	t.Helper()
	var p *nat.Plan
	tp.node.MustDo(func() (err error) { p, err = tp.nat.Plan(context.Background(), d); return err })
	return p
}

func (tp *topo) observed(t *testing.T) nat.State {
	t.Helper()
	var st nat.State
	tp.node.MustDo(func() (err error) { st, err = tp.nat.Observed(context.Background()); return err })
	return st
}

// corpusLines returns the lines of iptables-save in the node that mention
// corpus's chains, then those of nft's listing of corpus's table.
func (tp *topo) corpusLines(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(tp.node.MustRun("iptables-save"), "\n") {
		if strings.HasPrefix(l, ":CORPUS-") || strings.HasPrefix(l, "-A CORPUS-") || strings.Contains(l, "-j CORPUS-") {
			out = append(out, l)
		}
	}
	return append(out, tp.tableLines(t)...)
}

// tableLines returns nft's listing of corpus's table in the node, one
// element a line, or nothing when there is no table.
func (tp *topo) tableLines(t *testing.T) []string {
	t.Helper()
	list := tp.node.MustRun("nft", "list", "tables", "ip")
	if !slices.Contains(strings.Split(strings.TrimSpace(list), "\n"), "table ip corpus") {
		return nil
	}
	var out []string
	for _, l := range strings.Split(tp.node.MustRun("nft", "-n", "list", "table", "ip", "corpus"), "\n") {
		for _, part := range strings.Split(l, ",") {
			part = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(part), "elements = { "), " }")
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, "nft "+part)
			}
		}
	}
	return out
}

// serve answers on tcp/80 and udp/53 inside ns with "<name> <remote>".
func serve(t *testing.T, ns *nstest.NS, name string) {
	serveTCP(t, ns, name, ":80")
	pc := ns.ListenPacket("udp4", ":53")
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(name+" "+from.String()+"\n"), from)
		}
	}()
}

func serveTCP(t *testing.T, ns *nstest.NS, name, addr string) {
	l := ns.Listen("tcp4", addr)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr())
			c.Close()
		}
	}()
}

// ask connects from ns to addr and returns who answered and the source
// address the answerer saw.
func ask(ns *nstest.NS, network, addr string) (who, seen string, err error) {
	c, err := ns.Dial(network, addr, 2*time.Second)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(testrun.D(2 * time.Second)))
	if network == "udp4" {
		if _, err := c.Write([]byte("hi")); err != nil {
			return "", "", err
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", "", err
	}
	who, seen, _ = strings.Cut(strings.TrimSpace(line), " ")
	if h, _, err := net.SplitHostPort(seen); err == nil {
		seen = h
	}
	return who, seen, nil
}

type path struct {
	name          string
	from          func(*topo) *nstest.NS
	network, addr string
	who, seen     string // empty who: the connection must fail
}

var paths = []path{
	{"client to guest through DNAT", (*topo).clientNS, "tcp4", node + ":8080", "guest1", "10.99.0.2"},
	{"client to second guest", (*topo).clientNS, "tcp4", node + ":8081", "guest2", "10.99.0.2"},
	{"client to address-bound forward", (*topo).clientNS, "tcp4", node + ":8082", "guest2", "10.99.0.2"},
	{"client to guest over udp", (*topo).clientNS, "udp4", node + ":5353", "guest1", "10.99.0.2"},
	{"guest to client through masquerade", (*topo).g1NS, "tcp4", "10.99.0.2:9000", "client", node},
	{"hairpin to other guest", (*topo).g1NS, "tcp4", node + ":8081", "guest2", gw},
	{"hairpin to itself", (*topo).g1NS, "tcp4", node + ":8080", "guest1", gw},
	{"hairpin through gateway address", (*topo).g2NS, "tcp4", gw + ":8080", "guest1", gw},
	{"hairpin udp to itself", (*topo).g1NS, "udp4", node + ":5353", "guest1", gw},
	{"node to its own published port", (*topo).nodeNS, "tcp4", node + ":8080", "guest1", node},
	{"address-bound forward not on the gateway address", (*topo).g1NS, "tcp4", gw + ":8082", "", ""},
	{"loopback is not forwarded", (*topo).nodeNS, "tcp4", "127.0.0.1:8080", "", ""},
}

func (tp *topo) clientNS() *nstest.NS { return tp.client }
func (tp *topo) nodeNS() *nstest.NS   { return tp.node }
func (tp *topo) g1NS() *nstest.NS     { return tp.g1 }
func (tp *topo) g2NS() *nstest.NS     { return tp.g2 }

func checkPaths(t *testing.T, tp *topo, ps []path) {
	t.Helper()
	for _, p := range ps {
		who, seen, err := ask(p.from(tp), p.network, p.addr)
		switch {
		case p.who == "" && err == nil && p.network == "tcp4":
			t.Errorf("%s: %s %s answered by %s (saw %s), want no answer", p.name, p.network, p.addr, who, seen)
		case p.who != "" && err != nil:
			t.Errorf("%s: %s %s: %v, want an answer from %s", p.name, p.network, p.addr, err, p.who)
		case p.who != "" && (who != p.who || seen != p.seen):
			t.Errorf("%s: %s %s answered by %s seeing %s, want %s seeing %s", p.name, p.network, p.addr, who, seen, p.who, p.seen)
		}
	}
}

func TestTraffic(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	tp.apply(t, tp.desired)
	checkPaths(t, tp, paths)
	st := tp.observed(t)
	if len(st.Forwards) != len(tp.desired.Forwards) {
		t.Errorf("Observed forwards = %v, want %v", st.Forwards, tp.desired.Forwards)
	}
}

// TestTrafficWithForwardDrop: on a node whose FORWARD policy drops (as
// Docker and most firewalls leave it), CORPUS-FORWARD lets guest traffic
// through and nothing else.
func TestTrafficWithForwardDrop(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	tp.node.MustRun("iptables", "-t", "filter", "-P", "FORWARD", "DROP")
	tp.node.MustRun("iptables", "-t", "filter", "-A", "FORWARD", "-j", "DROP")
	checkPaths(t, tp, []path{{"before Apply, nothing is forwarded", (*topo).g1NS, "tcp4", "10.99.0.2:9000", "", ""}})
	tp.apply(t, tp.desired)
	checkPaths(t, tp, paths)
	tp.client.MustDo(func() error {
		_, dst, _ := net.ParseCIDR(gateway.Masked().String())
		return netlink.RouteAdd(&netlink.Route{Dst: dst, Gw: net.IP(nodeAddr.Addr().AsSlice())})
	})
	checkPaths(t, tp, []path{{"routed to a guest without DNAT is still dropped", (*topo).clientNS, "tcp4", guest1.String() + ":80", "", ""}})
}

// TestHairpinNeedsHairpinMode shows why bridge ports get hairpin mode:
// with br_netfilter on (bridge-nf-call-iptables=1, as on this kind of
// host), a guest reaching its own published port is DNATed at the bridge
// and the frame has to go back out of the port it came from.
func TestHairpinNeedsHairpinMode(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	tp.apply(t, tp.desired)
	var brnf string
	tp.node.MustDo(func() error {
		v, err := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-iptables")
		brnf = strings.TrimSpace(string(v))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	})
	if brnf != "1" {
		t.Skipf("br_netfilter is not calling iptables here (bridge-nf-call-iptables=%q); hairpin mode makes no difference", brnf)
	}
	tp.node.MustDo(func() error {
		l, err := netlink.LinkByName("vg1")
		if err != nil {
			return err
		}
		return netlink.LinkSetHairpin(l, false)
	})
	checkPaths(t, tp, []path{{"hairpin to itself without hairpin mode", (*topo).g1NS, "tcp4", node + ":8080", "", ""}})
	host := netns.New(netns.Config{})
	var ch netns.BridgeChanges
	tp.node.MustDo(func() (err error) {
		ch, err = host.EnsureBridge(context.Background(), netns.Bridge{Name: "br0", Gateway: gateway})
		return err
	})
	if len(ch.HairpinPorts) != 1 || ch.HairpinPorts[0] != "vg1" {
		t.Errorf("EnsureBridge = %+v, want hairpin mode restored on vg1", ch)
	}
	checkPaths(t, tp, []path{{"hairpin to itself after EnsureBridge", (*topo).g1NS, "tcp4", node + ":8080", "guest1", gw}})
}

func TestApplyIsIdempotent(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	tp.apply(t, tp.desired)
	first := tp.corpusLines(t)
	// 3 chain declarations, 3 jumps, 2 postrouting, 4 forward, 4 input.
	if want, got := 3+3+2+4+4, len(first)-len(tp.tableLines(t)); got != want {
		t.Errorf("iptables-save has %d corpus lines after Apply, want %d:\n%s", got, want, strings.Join(first, "\n"))
	}
	if st := tp.observed(t); !st.Table || fmt.Sprint(st.Forwards) != fmt.Sprint(sortedForwards(tp.desired.Forwards)) {
		t.Errorf("Observed after Apply = table %v, forwards %v; want the table and %v", st.Table, st.Forwards, tp.desired.Forwards)
	}
	for i := range 3 {
		if p := tp.plan(t, tp.desired); !p.Empty() {
			t.Errorf("Plan after Apply #%d = %v\n%s\nwant empty", i+1, p, p.Restore)
		}
		tp.apply(t, tp.desired)
		if got := tp.corpusLines(t); strings.Join(got, "\n") != strings.Join(first, "\n") {
			t.Errorf("corpus lines after Apply #%d:\n%s\nwant\n%s", i+2, strings.Join(got, "\n"), strings.Join(first, "\n"))
		}
	}
	// A fresh NAT (an agent restart) sees the same rules and writes nothing.
	restarted, err := nat.New(nat.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tp.node.MustDo(func() error {
		p, err := restarted.Plan(context.Background(), tp.desired)
		if err == nil && !p.Empty() {
			err = fmt.Errorf("plan after restart = %v, want empty", p)
		}
		return err
	})
}

func TestApplyRepairsHandEdits(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	tp.apply(t, tp.desired)
	want := tp.corpusLines(t)
	tests := []struct {
		name string
		argv [][]string
	}{
		{"flushed chains and maps, deleted jump", [][]string{
			{"nft", "flush", "map", "ip", "corpus", "dnat_any"},
			{"nft", "flush", "chain", "ip", "corpus", "output"},
			{"iptables", "-t", "nat", "-F", "CORPUS-POSTROUTING"},
			{"iptables", "-t", "filter", "-F", "CORPUS-FORWARD"},
			{"iptables", "-t", "nat", "-D", "POSTROUTING", "-j", "CORPUS-POSTROUTING"},
		}},
		{"deleted chain and table", [][]string{
			{"iptables", "-t", "filter", "-F", "CORPUS-INPUT"},
			{"iptables", "-t", "filter", "-D", "INPUT", "-j", "CORPUS-INPUT"},
			{"iptables", "-t", "filter", "-X", "CORPUS-INPUT"},
			{"nft", "delete", "table", "ip", "corpus"},
		}},
		{"stray element, duplicate jump, edited element, extra rule", [][]string{
			{"nft", "add", "element", "ip", "corpus", "dnat_any", "{ tcp . 9999 : 10.210.3.3 . 22 }"},
			{"iptables", "-t", "nat", "-A", "POSTROUTING", "-j", "CORPUS-POSTROUTING"},
			{"nft", "delete", "element", "ip", "corpus", "dnat_any", "{ tcp . 8080 }"},
			{"nft", "add", "element", "ip", "corpus", "dnat_any", "{ tcp . 8080 : 10.210.3.3 . 80 }"},
			{"nft", "add", "rule", "ip", "corpus", "prerouting", "tcp", "dport", "7000", "dnat", "to", "10.210.3.3:80"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, argv := range tt.argv {
				tp.node.MustRun(argv...)
			}
			if p := tp.plan(t, tp.desired); p.Empty() {
				t.Fatalf("Plan after %s is empty, want repairs", tt.name)
			}
			tp.apply(t, tp.desired)
			if got := tp.corpusLines(t); strings.Join(sorted(got), "\n") != strings.Join(sorted(want), "\n") {
				t.Errorf("corpus lines after repair:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if p := tp.plan(t, tp.desired); !p.Empty() {
				t.Errorf("Plan after repair = %v, want empty", p)
			}
			checkPaths(t, tp, paths[:7])
		})
	}
}

func TestForeignRulesSurvive(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	foreign := [][]string{
		{"-t", "nat", "-A", "PREROUTING", "-p", "tcp", "--dport", "7000", "-j", "DNAT", "--to-destination", "10.210.3.3:80"},
		{"-t", "nat", "-A", "POSTROUTING", "-s", "192.0.2.0/24", "-j", "MASQUERADE"},
		{"-t", "nat", "-A", "OUTPUT", "-m", "comment", "--comment", "mentions CORPUS-DNAT", "-j", "RETURN"},
		{"-t", "filter", "-A", "FORWARD", "-s", "198.51.100.0/24", "-j", "DROP"},
		{"-t", "filter", "-N", "OTHER"},
		{"-t", "filter", "-A", "OTHER", "-j", "RETURN"},
	}
	for _, r := range foreign {
		tp.node.MustRun(append([]string{"iptables"}, r...)...)
	}
	before := foreignLines(tp.node.MustRun("iptables-save"))
	if len(before) < len(foreign) {
		t.Fatalf("found %d foreign lines, want at least %d:\n%s", len(before), len(foreign), strings.Join(before, "\n"))
	}
	tp.apply(t, tp.desired)
	if after := foreignLines(tp.node.MustRun("iptables-save")); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("foreign rules after Apply:\n%s\nwant\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	checkPaths(t, tp, []path{{"foreign DNAT still works", (*topo).clientNS, "tcp4", node + ":7000", "guest2", "10.99.0.2"}})
	tp.node.MustDo(func() error { return tp.nat.Remove(context.Background()) })
	if got := tp.corpusLines(t); len(got) != 0 || tp.observed(t).Table {
		t.Errorf("corpus lines after Remove:\n%s\nwant none", strings.Join(got, "\n"))
	}
	if after := foreignLines(tp.node.MustRun("iptables-save")); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("foreign rules after Remove:\n%s\nwant\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	// Remove with nothing there succeeds.
	tp.node.MustDo(func() error { return tp.nat.Remove(context.Background()) })
	if st := tp.observed(t); st.RuleCount() != 0 || len(st.Rules) != 0 || st.Table {
		t.Errorf("Observed after Remove = %+v, want nothing", st)
	}
}

// foreignLines returns the rule and chain lines of iptables-save that
// are not corpus's, without counters and comments.
func foreignLines(save string) []string {
	var out []string
	for _, l := range strings.Split(save, "\n") {
		if strings.HasPrefix(l, "#") || strings.Contains(l, "-j CORPUS-") || strings.HasPrefix(l, "-A CORPUS-") || strings.HasPrefix(l, ":CORPUS-") {
			continue
		}
		if strings.HasPrefix(l, ":") {
			l, _, _ = strings.Cut(l, " [")
		}
		out = append(out, l)
	}
	return out
}

func TestPrefixesAreIndependent(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	tp.apply(t, tp.desired)
	other, err := nat.New(nat.Config{Prefix: "CORPUS_B"})
	if err != nil {
		t.Fatal(err)
	}
	tp.node.MustDo(func() error { return other.Apply(context.Background(), nat.Desired{}) })
	tp.node.MustDo(func() error { return other.Remove(context.Background()) })
	if p := tp.plan(t, tp.desired); !p.Empty() {
		t.Errorf("Plan of CORPUS after CORPUS_B applied and removed = %v, want empty", p)
	}
}

func TestInvalidDesiredChangesNothing(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	tp.apply(t, tp.desired)
	before := tp.corpusLines(t)
	bad := tp.desired
	bad.Forwards = append(append([]nat.Forward(nil), bad.Forwards...), nat.Forward{Proto: "tcp", HostPort: 8080, GuestAddr: guest2, GuestPort: 80})
	err := tp.node.Do(func() error { return tp.nat.Apply(context.Background(), bad) })
	if !errors.Is(err, nat.ErrConflict) {
		t.Errorf("Apply with two forwards on tcp/8080 = %v, want ErrConflict", err)
	}
	if got := tp.corpusLines(t); strings.Join(got, "\n") != strings.Join(before, "\n") {
		t.Errorf("rules changed after a refused Apply")
	}
}

func sortedForwards(fs []nat.Forward) []nat.Forward {
	out := slices.Clone(fs)
	slices.SortFunc(out, func(a, b nat.Forward) int {
		return cmp.Or(strings.Compare(a.Proto, b.Proto), cmp.Compare(a.HostPort, b.HostPort), a.HostAddr.Compare(b.HostAddr))
	})
	return out
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestMain(m *testing.M) { nstest.Main(m) }

// TestPassed: a transaction of another of corpus's writers that leaves
// the NAT's chains and table alone (the layer-2 filter's table, here a
// table of its own) does not make the next Apply read them back when
// the NAT is told of it; untold, or when another transaction came
// between, it reads them.
func TestPassed(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	tp.apply(t, tp.desired)
	tp.plan(t, tp.desired) // knows the ruleset from here
	if p := tp.plan(t, tp.desired); !p.Empty() || p.ReadChains || p.ReadTable {
		t.Fatalf("Plan, nothing changed since the last = %v, want empty and made without reading back", p)
	}
	other := func(tell bool, extra bool) {
		t.Helper()
		var before, after uint32
		tp.node.MustDo(func() (err error) { before, err = nftconn.Generation(context.Background()); return err })
		tp.node.MustRun("nft", "add", "table", "bridge", "other")
		if extra {
			tp.node.MustRun("nft", "add", "table", "bridge", "another")
		}
		tp.node.MustDo(func() (err error) { after, err = nftconn.Generation(context.Background()); return err })
		if tell {
			tp.nat.Passed(before, after)
		}
	}
	for _, s := range []struct {
		name        string
		tell, extra bool
		read        bool
	}{
		{"told of it", true, false, false},
		{"not told", false, false, true},
		{"told, with another transaction between", true, true, true},
	} {
		other(s.tell, s.extra)
		p := tp.plan(t, tp.desired)
		if !p.Empty() || p.ReadChains != s.read || p.ReadTable != s.read {
			t.Errorf("%s: Plan = %v, read chains %t, table %t; want empty, and read back %t", s.name, p, p.ReadChains, p.ReadTable, s.read)
		}
		tp.node.MustRun("nft", "delete", "table", "bridge", "other")
		if s.extra {
			tp.node.MustRun("nft", "delete", "table", "bridge", "another")
		}
		tp.plan(t, tp.desired) // reads back what the deletes moved
	}
}
