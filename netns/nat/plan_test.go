package nat

import (
	"fmt"
	"net/netip"
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
	// nat: 2 in PREROUTING/OUTPUT, 3 DNAT, 2 POSTROUTING; filter: 4
	// FORWARD, 4 INPUT.
	if len(p.NewChains) != 6 || p.Added != 2+3+2+4+4 || p.Deleted != 0 || len(p.InsertJumps) != 5 || len(p.DeleteJumps) != 0 {
		t.Errorf("plan from empty = %v, want 6 chains, 15 rules, 5 jumps", p)
	}
	want := "*nat\n:CORPUS-DNAT - [0:0]\n:CORPUS-PREROUTING - [0:0]\n:CORPUS-OUTPUT - [0:0]\n:CORPUS-POSTROUTING - [0:0]\n"
	if !strings.HasPrefix(string(p.Restore), want) {
		t.Errorf("restore batch starts\n%s\nwant\n%s", p.Restore, want)
	}
}

func TestPlanDiff(t *testing.T) {
	t.Parallel()
	l := newLayout("CORPUS")
	base := manyForwards(10000)
	applied := l.render(base)
	extra := func(d Desired, f Forward) Desired {
		d.Forwards = append(append([]Forward(nil), d.Forwards...), f)
		return d
	}
	newFwd := Forward{Proto: "udp", HostPort: 53, GuestAddr: netip.MustParseAddr("10.210.0.9"), GuestPort: 53}
	tests := []struct {
		name           string
		state          map[string]snapshot
		want           Desired
		added, deleted int
		insJ, delJ     int
		lines          int
	}{
		{name: "unchanged", state: saveOf(l, applied, ""), want: base},
		{name: "add one", state: saveOf(l, applied, ""), want: extra(base, newFwd), added: 1, lines: 3},
		{name: "remove one", state: saveOf(l, applied, ""), want: Desired{Subnets: base.Subnets, Bridge: base.Bridge, Forwards: base.Forwards[1:]}, deleted: 1, lines: 3},
		{name: "change one", state: saveOf(l, applied, ""), want: func() Desired {
			d := base
			d.Forwards = append([]Forward(nil), base.Forwards...)
			d.Forwards[500].GuestPort = 8080
			return d
		}(), added: 1, deleted: 1, lines: 4},
		{name: "stray rule and duplicate jump", state: saveOf(l, applied,
			"-A CORPUS-DNAT -p tcp -m tcp --dport 1 -j DNAT --to-destination 10.210.0.2:1\n"+
				"-A PREROUTING -m addrtype --dst-type LOCAL -j CORPUS-PREROUTING\n"+
				"-A OUTPUT -j CORPUS-OUTPUT\n"),
			want: base, deleted: 1, delJ: 2, lines: 3},
		{name: "duplicate rule", state: saveOf(l, applied,
			"-A CORPUS-DNAT "+applied[l.dnat][7]+"\n"), want: base, deleted: 1, lines: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := l.plan(l.render(tt.want), tt.state)
			if p.Added != tt.added || p.Deleted != tt.deleted || len(p.NewChains) != 0 ||
				len(p.InsertJumps) != tt.insJ || len(p.DeleteJumps) != tt.delJ || p.RestoreLines() != tt.lines {
				t.Errorf("plan = %v\n%s\nwant added=%d deleted=%d insert_jumps=%d delete_jumps=%d restore_lines=%d",
					p, p.Restore, tt.added, tt.deleted, tt.insJ, tt.delJ, tt.lines)
			}
			if tt.name == "unchanged" && !p.Empty() {
				t.Errorf("plan.Empty() = false for %v, want true", p)
			}
		})
	}
}

func TestDiffRules(t *testing.T) {
	t.Parallel()
	del, add := diffRules([]string{"a", "b", "b", "c", "x"}, []string{"a", "b", "c", "d"})
	if fmt.Sprint(del) != "[b x]" || fmt.Sprint(add) != "[d]" {
		t.Errorf("diffRules = del %q add %q, want del [b x] add [d]", del, add)
	}
}

func BenchmarkPlanOneChange10k(b *testing.B) {
	l := newLayout("CORPUS")
	base := manyForwards(10000)
	state := saveOf(l, l.render(base), "")
	want := base
	want.Forwards = base.Forwards[1:]
	for b.Loop() {
		if err := want.Validate(); err != nil {
			b.Fatal(err)
		}
		if p := l.plan(l.render(want), state); p.Deleted != 1 {
			b.Fatal(p)
		}
	}
}
