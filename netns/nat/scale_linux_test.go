package nat_test

import (
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"corpus/netns/nat"
)

// withForwards returns d plus n forwards on tcp ports 20000.. spread over
// both guests.
func withForwards(d nat.Desired, n int) nat.Desired {
	d.Forwards = slices.Clone(d.Forwards)
	for i := range n {
		g := guest1
		if i%2 == 1 {
			g = guest2
		}
		d.Forwards = append(d.Forwards, nat.Forward{Proto: "tcp", HostPort: 20000 + i, GuestAddr: g, GuestPort: 80})
	}
	return d
}

func TestScale10000Forwards(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 rules take a few seconds; skipped with -short")
	}
	t.Parallel()
	tp := newTopo(t)
	const n = 10000
	big := withForwards(tp.desired, n)

	p := tp.plan(t, big)
	if want := n + len(tp.desired.Forwards) + 12; p.Added != want || len(p.NewChains) != 6 {
		t.Errorf("Plan from empty = %v, want %d rules in 6 new chains", p, want)
	}
	start := time.Now()
	tp.apply(t, big)
	t.Logf("apply %d forwards from empty: %v (%d restore lines)", n, time.Since(start), p.RestoreLines())

	st := tp.observed(t)
	if got := len(st.Forwards); got != len(big.Forwards) {
		t.Fatalf("Observed %d forwards, want %d", got, len(big.Forwards))
	}
	checkPaths(t, tp, []path{
		{"first of many", (*topo).clientNS, "tcp4", node + ":20000", "guest1", "10.99.0.2"},
		{"last of many", (*topo).clientNS, "tcp4", node + ":" + strconv.Itoa(20000+n-1), "guest2", "10.99.0.2"},
	})

	added := big
	added.Forwards = append(slices.Clone(big.Forwards), nat.Forward{Proto: "udp", HostPort: 40000, GuestAddr: guest1, GuestPort: 53})
	removed := big
	removed.Forwards = slices.Delete(slices.Clone(big.Forwards), 100, 101)
	changed := removed
	changed.Forwards = slices.Clone(removed.Forwards)
	changed.Forwards[5000].GuestAddr = netip.MustParseAddr("10.210.3.9")

	steps := []struct {
		name           string
		d              nat.Desired
		added, deleted int
		lines          int
		check          []path
	}{
		{"add one", added, 1, 0, 3, []path{{"added forward", (*topo).clientNS, "udp4", node + ":40000", "guest1", "10.99.0.2"}}},
		{"back to the 10,000", big, 0, 1, 3, nil},
		{"remove one", removed, 0, 1, 3, []path{{"removed forward", (*topo).clientNS, "tcp4", node + ":" + strconv.Itoa(big.Forwards[100].HostPort), "", ""}}},
		{"change one", changed, 1, 1, 4, nil},
		{"unchanged", changed, 0, 0, 0, nil},
	}
	for _, s := range steps {
		p := tp.plan(t, s.d)
		if p.Added != s.added || p.Deleted != s.deleted || p.RestoreLines() != s.lines || len(p.InsertJumps)+len(p.DeleteJumps) != 0 {
			t.Errorf("%s: Plan = %v\n%s\nwant added=%d deleted=%d in %d lines", s.name, p, p.Restore, s.added, s.deleted, s.lines)
		}
		start := time.Now()
		tp.apply(t, s.d)
		t.Logf("%s with %d present: %v (%d restore lines)", s.name, n, time.Since(start), p.RestoreLines())
		checkPaths(t, tp, s.check)
	}

	// Someone flushes the big chain: the next Apply puts back all of it.
	tp.node.MustRun("iptables", "-t", "nat", "-F", "CORPUS-DNAT")
	start = time.Now()
	tp.apply(t, changed)
	t.Logf("repair of a flushed %d-rule chain: %v", n, time.Since(start))
	if p := tp.plan(t, changed); !p.Empty() {
		t.Errorf("Plan after repair = %v, want empty", p)
	}
	if st := tp.observed(t); len(st.Forwards) != len(changed.Forwards) {
		t.Errorf("Observed %d forwards after repair, want %d", len(st.Forwards), len(changed.Forwards))
	}
}
