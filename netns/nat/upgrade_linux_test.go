package nat_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"corpus/netns/nat"
)

// TestUpgradeFromDNATChains: a node programmed by the previous version
// (its forwards as rules in CORPUS-DNAT, reached from PREROUTING and
// OUTPUT) is migrated by the first Apply: the forwards move to the
// table, the old chains and jumps go, traffic flows, and nothing more
// is left to do.
func TestUpgradeFromDNATChains(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	for _, argv := range [][]string{
		{"-t", "nat", "-N", "CORPUS-DNAT"},
		{"-t", "nat", "-N", "CORPUS-PREROUTING"},
		{"-t", "nat", "-N", "CORPUS-OUTPUT"},
		{"-t", "nat", "-A", "CORPUS-PREROUTING", "-j", "CORPUS-DNAT"},
		{"-t", "nat", "-A", "CORPUS-OUTPUT", "!", "-d", "127.0.0.0/8", "-j", "CORPUS-DNAT"},
		{"-t", "nat", "-A", "CORPUS-DNAT", "-p", "tcp", "-m", "tcp", "--dport", "8080", "-j", "DNAT", "--to-destination", "10.210.3.2:80"},
		{"-t", "nat", "-A", "CORPUS-DNAT", "-p", "tcp", "-m", "tcp", "--dport", "8081", "-j", "DNAT", "--to-destination", "10.210.3.3:80"},
		{"-t", "nat", "-I", "PREROUTING", "1", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "CORPUS-PREROUTING"},
		{"-t", "nat", "-I", "OUTPUT", "1", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "CORPUS-OUTPUT"},
	} {
		tp.node.MustRun(append([]string{"iptables"}, argv...)...)
	}
	checkPaths(t, tp, []path{{"the previous version's forward", (*topo).clientNS, "tcp4", node + ":8080", "guest1", "10.99.0.2"}})

	p := tp.plan(t, tp.desired)
	if len(p.StaleChains) != 3 || len(p.DeleteJumps) != 2 || !p.Table {
		t.Errorf("Plan over the previous version's chains = %v, want the table made, 3 stale chains and 2 jumps deleted", p)
	}
	tp.apply(t, tp.desired)
	save := tp.node.MustRun("iptables-save", "-t", "nat")
	for _, old := range []string{"CORPUS-DNAT", "CORPUS-PREROUTING", "CORPUS-OUTPUT"} {
		if strings.Contains(save, old) {
			t.Errorf("iptables-save after the upgrade still mentions %s:\n%s", old, save)
		}
	}
	if st := tp.observed(t); len(st.Forwards) != len(tp.desired.Forwards) || slices.ContainsFunc(st.Jumps, func(j nat.Jump) bool { return j.Name == "PREROUTING" }) {
		t.Errorf("Observed after the upgrade = %+v, want %d forwards and no PREROUTING jump", st, len(tp.desired.Forwards))
	}
	checkPaths(t, tp, paths)
	if p := tp.plan(t, tp.desired); !p.Empty() {
		t.Errorf("Plan after the upgrade = %v, want empty", p)
	}
}

// TestUpgradeWithForeignJump: a rule of someone else's chain still
// jumping to an old chain keeps that chain from being deleted; Apply
// says so, and everything else is done: the forwards work. Once the
// rule is gone, the next Apply deletes the old chains.
func TestUpgradeWithForeignJump(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	for _, argv := range [][]string{
		{"-t", "nat", "-N", "CORPUS-DNAT"},
		{"-t", "nat", "-A", "CORPUS-DNAT", "-p", "tcp", "-m", "tcp", "--dport", "8080", "-j", "DNAT", "--to-destination", "10.210.3.3:80"},
		{"-t", "nat", "-N", "OTHER"},
		{"-t", "nat", "-A", "OTHER", "-j", "CORPUS-DNAT"},
	} {
		tp.node.MustRun(append([]string{"iptables"}, argv...)...)
	}
	err := tp.node.Do(func() error { return tp.nat.Apply(context.Background(), tp.desired) })
	if err == nil || !strings.Contains(err.Error(), "CORPUS-DNAT") {
		t.Errorf("Apply with a foreign jump to CORPUS-DNAT = %v, want an error naming the chain", err)
	}
	checkPaths(t, tp, paths)

	tp.node.MustRun("iptables", "-t", "nat", "-F", "OTHER")
	tp.apply(t, tp.desired)
	if save := tp.node.MustRun("iptables-save", "-t", "nat"); strings.Contains(save, "CORPUS-DNAT") {
		t.Errorf("iptables-save after the foreign jump went still mentions CORPUS-DNAT:\n%s", save)
	}
	if p := tp.plan(t, tp.desired); !p.Empty() {
		t.Errorf("Plan after the upgrade = %v, want empty", p)
	}
}
