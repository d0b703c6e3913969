package nat

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// saveOf prints want as iptables-save would after Apply, so plan tests
// run without iptables.
func saveOf(l layout, want map[Chain][]string, extra string) map[string]snapshot {
	var b strings.Builder
	for _, table := range tables {
		fmt.Fprintf(&b, "*%s\n", table)
		for _, c := range l.chains() {
			if c.Table == table {
				fmt.Fprintf(&b, ":%s - [0:0]\n", c.Name)
			}
		}
		for _, j := range l.jumps {
			if j.Table == table {
				fmt.Fprintf(&b, "-A %s %s\n", j.Name, j.Rule)
			}
		}
		for _, c := range l.chains() {
			if c.Table == table {
				for _, r := range want[c] {
					fmt.Fprintf(&b, "-A %s %s\n", c.Name, r)
				}
			}
		}
		if table == "nat" {
			b.WriteString(extra)
		}
		b.WriteString("COMMIT\n")
	}
	out := map[string]snapshot{}
	for _, table := range tables {
		out[table] = l.parseSave(table, []byte(b.String()))
	}
	return out
}

func manyForwards(n int) Desired {
	d := Desired{Subnets: []netip.Prefix{netip.MustParsePrefix("10.210.0.0/16")}, Bridge: "br0"}
	for i := range n {
		d.Forwards = append(d.Forwards, Forward{
			Proto: "tcp", HostPort: 10000 + i,
			GuestAddr: netip.AddrFrom4([4]byte{10, 210, byte(i / 250), byte(2 + i%250)}), GuestPort: 80,
		})
	}
	return d
}

func TestPlanFromEmpty(t *testing.T) {
	t.Parallel()
	l := newLayout("CORPUS")
	d := manyForwards(3)
	p := l.plan(l.render(d), map[string]snapshot{})
	p.planTable(forwardElements(d.Forwards), observedTable{})
	// nat: 2 POSTROUTING; filter: 4 FORWARD, 4 INPUT; the table with
	// its 3 forwards.
	if len(p.NewChains) != 3 || p.Added != 2+4+4 || p.Deleted != 0 || len(p.InsertJumps) != 3 || len(p.DeleteJumps) != 0 ||
		!p.Table || len(p.AddForwards) != 3 || p.elementsChanged() != 3 {
		t.Errorf("plan from empty = %v, want 3 chains, 10 rules, 3 jumps, the table and 3 forwards", p)
	}
	want := "*nat\n:CORPUS-POSTROUTING - [0:0]\n-A CORPUS-POSTROUTING "
	if !strings.HasPrefix(string(p.Restore), want) {
		t.Errorf("restore batch starts\n%s\nwant\n%s", p.Restore, want)
	}
}

// TestPlanMigrates: the chains and jumps an agent of the previous
// version left (its forwards in CORPUS-DNAT) are deleted, and nothing
// else of the nat table is touched.
func TestPlanMigrates(t *testing.T) {
	t.Parallel()
	l := newLayout("CORPUS")
	d := manyForwards(2)
	old := "-A PREROUTING -m addrtype --dst-type LOCAL -j CORPUS-PREROUTING\n" +
		"-A OUTPUT -m addrtype --dst-type LOCAL -j CORPUS-OUTPUT\n" +
		":CORPUS-PREROUTING - [0:0]\n:CORPUS-OUTPUT - [0:0]\n:CORPUS-DNAT - [0:0]\n" +
		"-A CORPUS-PREROUTING -j CORPUS-DNAT\n-A CORPUS-OUTPUT ! -d 127.0.0.0/8 -j CORPUS-DNAT\n" +
		"-A CORPUS-DNAT -p tcp -m tcp --dport 10000 -j DNAT --to-destination 10.210.0.2:80\n" +
		"-A CORPUS-DNAT -p tcp -m tcp --dport 10001 -j DNAT --to-destination 10.210.0.3:80\n"
	p := l.plan(l.render(d), saveOf(l, l.render(d), old))
	wantStale := []Chain{{"nat", "CORPUS-DNAT"}, {"nat", "CORPUS-OUTPUT"}, {"nat", "CORPUS-PREROUTING"}}
	if fmt.Sprint(p.StaleChains) != fmt.Sprint(wantStale) || len(p.DeleteJumps) != 2 || len(p.InsertJumps) != 0 || p.Added != 0 || p.Deleted != 4 {
		t.Errorf("plan over the previous version's chains = %v (stale %v), want the 3 stale chains, 4 rules and 2 jumps deleted", p, p.StaleChains)
	}
	want := "*nat\n-F CORPUS-DNAT\n-F CORPUS-OUTPUT\n-F CORPUS-PREROUTING\n-X CORPUS-DNAT\n-X CORPUS-OUTPUT\n-X CORPUS-PREROUTING\nCOMMIT\n"
	if string(p.Cleanup) != want || len(p.Restore) != 0 {
		t.Errorf("cleanup batch =\n%s\nwant\n%s\nand restore batch\n%s\nwant none", p.Cleanup, want, p.Restore)
	}
}

func TestPlanTable(t *testing.T) {
	t.Parallel()
	base := manyForwards(10000)
	have := observedTable{exists: true, whole: true, elems: forwardElements(base.Forwards)}
	newFwd := Forward{Proto: "udp", HostPort: 53, HostAddr: netip.MustParseAddr("10.99.0.1"), GuestAddr: netip.MustParseAddr("10.210.0.9"), GuestPort: 53}
	changed := slices.Clone(base.Forwards)
	changed[500].GuestPort = 8080
	stray := observedTable{exists: true, whole: true, elems: forwardElements(base.Forwards)}
	stray.elems[anyMap][elemKey{1, 0, 0, 0, 0, 1}] = elemVal{10, 210, 0, 2, 0, 1}
	tests := []struct {
		name     string
		have     observedTable
		want     []Forward
		table    bool
		add, del []Forward
		elems    int
	}{
		{name: "unchanged", have: have, want: base.Forwards},
		{name: "add one", have: have, want: append(slices.Clone(base.Forwards), newFwd), add: []Forward{newFwd}, elems: 1},
		{name: "remove one", have: have, want: base.Forwards[1:], del: base.Forwards[:1], elems: 1},
		{name: "change one", have: have, want: changed, add: changed[500:501], del: base.Forwards[500:501], elems: 2},
		{name: "stray element", have: stray, want: base.Forwards, elems: 1},
		{name: "table not whole", have: observedTable{exists: true}, want: base.Forwards[:2], table: true, add: base.Forwards[:2], elems: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &Plan{}
			p.planTable(forwardElements(tt.want), tt.have)
			if p.Table != tt.table || fmt.Sprint(p.AddForwards) != fmt.Sprint(tt.add) ||
				fmt.Sprint(p.DeleteForwards) != fmt.Sprint(tt.del) || p.elementsChanged() != tt.elems {
				t.Errorf("plan = %v: add %v delete %v; want table=%v add %v delete %v, %d elements",
					p, p.AddForwards, p.DeleteForwards, tt.table, tt.add, tt.del, tt.elems)
			}
			if p.Empty() != (tt.elems == 0 && !tt.table) {
				t.Errorf("plan.Empty() = %v for %v", p.Empty(), p)
			}
		})
	}
}

func BenchmarkPlanOneChange10k(b *testing.B) {
	l := newLayout("CORPUS")
	base := manyForwards(10000)
	state := saveOf(l, l.render(base), "")
	have := observedTable{exists: true, whole: true, elems: forwardElements(base.Forwards)}
	want := base
	want.Forwards = base.Forwards[1:]
	for b.Loop() {
		if err := want.Validate(); err != nil {
			b.Fatal(err)
		}
		p := l.plan(l.render(want), state)
		p.planTable(forwardElements(want.Forwards), have)
		if len(p.DeleteForwards) != 1 || len(p.Restore) != 0 {
			b.Fatal(p)
		}
	}
}
