package l2filter_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"corpus/netns/internal/nstest"
	"corpus/netns/l2filter"
)

// wantRules is the number of rules in the chain with a port prefix.
const wantRules = 9

// filterNS is a namespace with a filter and no links: the table names
// ports, whether they exist or not.
type filterNS struct {
	ns *nstest.NS
	f  *l2filter.Filter
}

func newFilterNS(t testing.TB) *filterNS {
	t.Helper()
	nstest.RequireRoot(t)
	f, err := l2filter.New(l2filter.Config{PortPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return &filterNS{ns: nstest.New(t, "l2"), f: f}
}

func (n *filterNS) apply(t testing.TB, ports []l2filter.Port) l2filter.Changes {
	t.Helper()
	var ch l2filter.Changes
	n.ns.MustDo(func() (err error) { ch, err = n.f.Apply(t.Context(), ports); return err })
	return ch
}

func (n *filterNS) observed(t testing.TB) l2filter.State {
	t.Helper()
	var st l2filter.State
	n.ns.MustDo(func() (err error) { st, err = n.f.Observed(t.Context()); return err })
	return st
}

// nft changes the table through netlink as `nft` would by hand.
func (n *filterNS) nft(t testing.TB, change func(c *nftables.Conn, tb *nftables.Table) error) {
	t.Helper()
	n.ns.MustDo(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		if err := change(c, &nftables.Table{Name: l2filter.DefaultTable, Family: nftables.TableFamilyBridge}); err != nil {
			return err
		}
		return c.Flush()
	})
}

// ports returns n guest ports cg0..., with MACs and addresses of their
// own from 10.210.0.2 on.
func ports(n int) []l2filter.Port {
	out := make([]l2filter.Port, n)
	for i := range out {
		a := netip.AddrFrom4([4]byte{10, 210, byte((i + 2) >> 8), byte(i + 2)})
		out[i] = l2filter.Port{
			Iface: fmt.Sprintf("cg%012x", i),
			MAC:   net.HardwareAddr{0x02, 0, 0, 0, byte(i >> 8), byte(i)},
			Addr:  a,
		}
	}
	return out
}

func samePorts(a, b []l2filter.Port) bool {
	return slices.EqualFunc(a, b, func(p, q l2filter.Port) bool { return p.String() == q.String() })
}

// TestApplyChangesOnlyWhatDiffers: ports added, replaced and removed are
// exactly what Apply reports and writes; the same ports again write
// nothing; bad ports are refused and change nothing.
func TestApplyChangesOnlyWhatDiffers(t *testing.T) {
	t.Parallel()
	n := newFilterNS(t)
	ps := ports(3)
	if ch := n.apply(t, ps); !ch.Table || len(ch.Added) != 3 {
		t.Errorf("Apply from nothing = %+v, want the table with 3 ports added", ch)
	}
	st := n.observed(t)
	if !st.Exists || !samePorts(st.Ports, ps) || st.Rules != wantRules {
		t.Errorf("Observed = %+v, want ports %v and %d rules", st, ps, wantRules)
	}
	if ch := n.apply(t, ps); ch.Changed() {
		t.Errorf("Apply of what is there = %+v, want no change", ch)
	}

	next := slices.Clone(ps[1:])
	next[0].MAC = net.HardwareAddr{0x02, 0xaa, 0, 0, 0, 1}
	next = append(next, ports(4)[3])
	ch := n.apply(t, next)
	if !slices.Equal(ch.Added, []string{next[2].Iface}) || !slices.Equal(ch.Replaced, []string{next[0].Iface}) ||
		!slices.Equal(ch.Removed, []string{ps[0].Iface}) || ch.Table || ch.Rules {
		t.Errorf("Apply with one port added, one replaced, one removed = %+v", ch)
	}
	if st := n.observed(t); !samePorts(st.Ports, next) {
		t.Errorf("Observed ports = %v, want %v", st.Ports, next)
	}

	dupMAC := append(slices.Clone(next), l2filter.Port{Iface: "cg9", MAC: next[0].MAC, Addr: netip.MustParseAddr("10.210.9.9")})
	for _, tc := range []struct {
		name  string
		ports []l2filter.Port
		want  error
	}{
		{"two ports with one MAC", dupMAC, l2filter.ErrConflict},
		{"a port listed twice", append(slices.Clone(next), next[1]), l2filter.ErrConflict},
		{"an IPv6 address", []l2filter.Port{{Iface: "cg1", MAC: next[0].MAC, Addr: netip.MustParseAddr("fd00::1")}}, l2filter.ErrInvalid},
		{"a multicast MAC", []l2filter.Port{{Iface: "cg1", MAC: net.HardwareAddr{1, 0, 0x5e, 0, 0, 1}, Addr: next[0].Addr}}, l2filter.ErrInvalid},
		{"no MAC", []l2filter.Port{{Iface: "cg1", Addr: next[0].Addr}}, l2filter.ErrInvalid},
		{"a long name", []l2filter.Port{{Iface: "cg0123456789abcdef", MAC: next[0].MAC, Addr: next[0].Addr}}, l2filter.ErrInvalid},
	} {
		err := n.ns.Do(func() error { _, err := n.f.Apply(t.Context(), tc.ports); return err })
		if !errors.Is(err, tc.want) {
			t.Errorf("Apply with %s = %v, want %v", tc.name, err, tc.want)
		}
	}
	if st := n.observed(t); !samePorts(st.Ports, next) {
		t.Errorf("after refused Applies, Observed ports = %v, want %v unchanged", st.Ports, next)
	}
}

// TestRepair: what someone changes by hand in corpus's table is put back
// by the next Apply, and only that.
func TestRepair(t *testing.T) {
	t.Parallel()
	ps := ports(2)
	other := slices.Clone(ps[1].MAC)
	other[5] ^= 0xff
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, n *filterNS)
		want   func(l2filter.Changes) bool
	}{
		{"rules flushed (nft flush table)", func(t *testing.T, n *filterNS) {
			n.nft(t, func(c *nftables.Conn, tb *nftables.Table) error { c.FlushTable(tb); return nil })
		}, func(ch l2filter.Changes) bool { return ch.Rules && !ch.Table }},
		{"last rule deleted", func(t *testing.T, n *filterNS) {
			n.nft(t, func(c *nftables.Conn, tb *nftables.Table) error {
				rs, err := c.GetRules(tb, &nftables.Chain{Name: "guests", Table: tb})
				if err != nil {
					return err
				}
				return c.DelRule(rs[len(rs)-1])
			})
		}, func(ch l2filter.Changes) bool { return ch.Rules && !ch.Table }},
		{"accept-all rule inserted", func(t *testing.T, n *filterNS) {
			n.nft(t, func(c *nftables.Conn, tb *nftables.Table) error {
				c.InsertRule(&nftables.Rule{Table: tb, Chain: &nftables.Chain{Name: "guests", Table: tb}, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
				return nil
			})
		}, func(ch l2filter.Changes) bool { return ch.Rules && !ch.Table }},
		{"MAC set flushed", func(t *testing.T, n *filterNS) {
			n.nft(t, func(c *nftables.Conn, tb *nftables.Table) error {
				c.FlushSet(&nftables.Set{Table: tb, Name: "macs"})
				return nil
			})
		}, func(ch l2filter.Changes) bool {
			return slices.Equal(ch.Replaced, []string{ps[0].Iface, ps[1].Iface}) && !ch.Rules
		}},
		{"another MAC added for a port", func(t *testing.T, n *filterNS) {
			n.nft(t, func(c *nftables.Conn, tb *nftables.Table) error {
				key := append(append(make([]byte, 16), other...), 0, 0)
				copy(key, ps[1].Iface)
				return c.SetAddElements(&nftables.Set{Table: tb, Name: "macs"}, []nftables.SetElement{{Key: key}})
			})
		}, func(ch l2filter.Changes) bool { return slices.Equal(ch.Replaced, []string{ps[1].Iface}) && !ch.Rules }},
		{"chain added", func(t *testing.T, n *filterNS) {
			n.nft(t, func(c *nftables.Conn, tb *nftables.Table) error {
				c.AddChain(&nftables.Chain{Name: "mine", Table: tb})
				return nil
			})
		}, func(ch l2filter.Changes) bool { return ch.Table }},
		{"table deleted", func(t *testing.T, n *filterNS) {
			n.nft(t, func(c *nftables.Conn, tb *nftables.Table) error { c.DelTable(tb); return nil })
		}, func(ch l2filter.Changes) bool { return ch.Table && len(ch.Added) == 2 }},
		{"table made dormant", func(t *testing.T, n *filterNS) {
			if _, err := exec.LookPath("nft"); err != nil {
				t.Skip("needs nft to set a table's flags (apt-get install nftables)")
			}
			n.ns.MustRun("nft", "add", "table", "bridge", l2filter.DefaultTable, "{ flags dormant; }")
		}, func(ch l2filter.Changes) bool { return ch.Table }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := newFilterNS(t)
			n.apply(t, ps)
			tc.damage(t, n)
			if ch := n.apply(t, ps); !tc.want(ch) {
				t.Errorf("Apply after the damage = %+v", ch)
			}
			if ch := n.apply(t, ps); ch.Changed() {
				t.Errorf("second Apply after the damage = %+v, want no change", ch)
			}
			if st := n.observed(t); !samePorts(st.Ports, ps) || st.Rules != wantRules {
				t.Errorf("Observed after repair = %+v", st)
			}
		})
	}
}

// TestRemove: Remove deletes the table; with nothing there it is not an
// error; the next Apply makes it again.
func TestRemove(t *testing.T) {
	t.Parallel()
	n := newFilterNS(t)
	n.apply(t, ports(2))
	for range 2 {
		n.ns.MustDo(func() error { return n.f.Remove(t.Context()) })
		if st := n.observed(t); st.Exists {
			t.Fatalf("Observed after Remove = %+v, want no table", st)
		}
	}
	if ch := n.apply(t, ports(2)); !ch.Table {
		t.Errorf("Apply after Remove = %+v, want the table made", ch)
	}
}

// TestScale1000Ports: a node with 1,000 guests is programmed in one
// transaction, and one guest more or less changes three elements.
func TestScale1000Ports(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 ports; skipped with -short")
	}
	t.Parallel()
	n := newFilterNS(t)
	ps := ports(1000)
	timed := func(what string, ports []l2filter.Port) l2filter.Changes {
		start := time.Now()
		ch := n.apply(t, ports)
		t.Logf("%s: %v", what, time.Since(start))
		return ch
	}
	if ch := timed("apply 1,000 ports from nothing", ps); len(ch.Added) != 1000 {
		t.Errorf("first Apply added %d ports, want 1000", len(ch.Added))
	}
	if ch := timed("apply 1,000 ports, nothing to change", ps); ch.Changed() {
		t.Errorf("second Apply = %+v, want no change", ch)
	}
	more := append(slices.Clone(ps), ports(1001)[1000])
	if ch := timed("apply 1,001 ports, one added", more); !slices.Equal(ch.Added, []string{more[1000].Iface}) {
		t.Errorf("Apply with one more = %+v", ch)
	}
	if ch := timed("apply 1,000 ports, one removed", more[1:]); !slices.Equal(ch.Removed, []string{more[0].Iface}) {
		t.Errorf("Apply with one fewer = %+v", ch)
	}
	if st := n.observed(t); len(st.Ports) != 1000 {
		t.Errorf("Observed %d ports, want 1000", len(st.Ports))
	}
	n.ns.MustDo(func() error { return n.f.Remove(t.Context()) })
	big := ports(10000)
	if ch := timed("apply 10,000 ports from nothing", big); len(ch.Added) != 10000 {
		t.Errorf("Apply of 10,000 added %d", len(ch.Added))
	}
}

// BenchmarkApply1000: a reconcile pass over 1,000 guest ports, with
// nothing to change and with one port replaced.
func BenchmarkApply1000(b *testing.B) {
	n := newFilterNS(b)
	ps := ports(1000)
	n.apply(b, ps)
	b.Run("unchanged", func(b *testing.B) {
		for b.Loop() {
			n.apply(b, ps)
		}
	})
	b.Run("one-replaced", func(b *testing.B) {
		alt := slices.Clone(ps)
		i := 0
		for b.Loop() {
			alt[0].MAC = net.HardwareAddr{0x02, 0xbb, 0, 0, byte(i >> 8), byte(i)}
			i++
			n.apply(b, alt)
		}
	})
}
