package nat_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/nftables"

	"corpus/internal/testrun"
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

// monitor records the kernel's nftables notifications in the node.
type monitor struct {
	events chan *nftables.MonitorEvents
	close  func() error
}

func (tp *topo) monitor(t *testing.T) *monitor {
	t.Helper()
	m := &monitor{}
	tp.node.MustDo(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		mon := nftables.NewMonitor(nftables.WithMonitorEventBuffer(1 << 16))
		if m.events, err = c.AddGenerationalMonitor(mon); err != nil {
			return err
		}
		m.close = mon.Close
		return nil
	})
	t.Cleanup(func() { m.close() })
	return m
}

// changes returns the changes of every transaction committed in the node
// since the last call: it commits a marker transaction of its own (a
// table made and deleted) and collects the transactions before it.
func (m *monitor) changes(t *testing.T, tp *topo) []*nftables.MonitorEvent {
	t.Helper()
	const marker = "corpustest_marker"
	tp.node.MustRun("nft", "add table ip "+marker+"; delete table ip "+marker)
	var out []*nftables.MonitorEvent
	deadline := time.After(testrun.D(10 * time.Second))
	for {
		select {
		case evs, ok := <-m.events:
			if !ok {
				t.Fatal("nftables monitor closed")
			}
			for _, e := range evs.Changes {
				if tb, ok := e.Data.(*nftables.Table); ok && tb.Name == marker {
					return out
				}
			}
			out = append(out, evs.Changes...)
		case <-deadline:
			t.Fatalf("the marker transaction never came through the monitor; saw %d changes", len(out))
		}
	}
}

// elementChanges counts added and deleted map elements among changes and
// returns the rest, described.
func elementChanges(changes []*nftables.MonitorEvent) (added, deleted int, other []string) {
	for _, e := range changes {
		elems, _ := e.Data.([]nftables.SetElement)
		switch e.Type {
		case nftables.MonitorEventTypeNewSetElem:
			added += len(elems)
		case nftables.MonitorEventTypeDelSetElem:
			deleted += len(elems)
		default:
			other = append(other, fmt.Sprintf("%d %T", e.Type, e.Data))
		}
	}
	return added, deleted, other
}

// TestScale10000Forwards: with 10,000 forwards, a change of one forward
// is one element added or deleted in the kernel (read from its own
// notifications) and nothing else, and the last forward carries
// traffic.
func TestScale10000Forwards(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 forwards take a few seconds; skipped with -short")
	}
	t.Parallel()
	tp := newTopo(t)
	const n = 10000
	big := withForwards(tp.desired, n)

	p := tp.plan(t, big)
	if want := n + len(tp.desired.Forwards); !p.Table || len(p.AddForwards) != want || len(p.NewChains) != 3 {
		t.Errorf("Plan from empty = %v, want the table, %d forwards and 3 new chains", p, want)
	}
	start := time.Now()
	tp.apply(t, big)
	t.Logf("apply %d forwards from empty: %v", n, time.Since(start))

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
	bound := changed
	bound.Forwards = append(slices.Clone(changed.Forwards), nat.Forward{Proto: "tcp", HostPort: 40001, HostAddr: nodeAddr.Addr(), GuestAddr: guest2, GuestPort: 80})

	mon := tp.monitor(t)
	steps := []struct {
		name           string
		d              nat.Desired
		added, deleted int
		check          []path
	}{
		{"add one", added, 1, 0, []path{{"added forward", (*topo).clientNS, "udp4", node + ":40000", "guest1", "10.99.0.2"}}},
		{"back to the 10,000", big, 0, 1, nil},
		{"remove one", removed, 0, 1, []path{{"removed forward", (*topo).clientNS, "tcp4", node + ":" + strconv.Itoa(big.Forwards[100].HostPort), "", ""}}},
		{"change one", changed, 1, 1, nil},
		{"add one bound to an address", bound, 1, 0, []path{{"bound forward", (*topo).clientNS, "tcp4", node + ":40001", "guest2", "10.99.0.2"}}},
		{"unchanged", bound, 0, 0, []path{{"last of many, still", (*topo).clientNS, "tcp4", node + ":" + strconv.Itoa(20000+n-1), "guest2", "10.99.0.2"}}},
	}
	for _, s := range steps {
		p := tp.plan(t, s.d)
		if len(p.AddForwards) != s.added || len(p.DeleteForwards) != s.deleted || p.Table || p.RestoreLines() != 0 || len(p.InsertJumps)+len(p.DeleteJumps) != 0 {
			t.Errorf("%s: Plan = %v, want %d forwards added and %d deleted, and nothing else", s.name, p, s.added, s.deleted)
		}
		mon.changes(t, tp) // what the plan's reading did, if anything
		start := time.Now()
		tp.apply(t, s.d)
		took := time.Since(start)
		if p := tp.plan(t, s.d); !p.Empty() || p.ReadTable || p.ReadChains {
			t.Errorf("%s: Plan after Apply = %v, want empty and made without reading the maps or chains back", s.name, p)
		}
		a, d, other := elementChanges(mon.changes(t, tp))
		if a != s.added || d != s.deleted || len(other) != 0 {
			t.Errorf("%s: the kernel saw %d elements added, %d deleted and %v; want %d added, %d deleted and nothing else", s.name, a, d, other, s.added, s.deleted)
		}
		t.Logf("%s with %d present: %v", s.name, n, took)
		checkPaths(t, tp, s.check)
	}

	// Someone flushes the map: the next Apply puts back all of it.
	tp.node.MustRun("nft", "flush", "map", "ip", "corpus", "dnat_any")
	if p := tp.plan(t, bound); !p.ReadTable || !p.ReadChains || len(p.AddForwards) != n+2 {
		t.Errorf("Plan after the map was flushed by hand = %v, want the maps read back and %d forwards added", p, n+2)
	}
	start = time.Now()
	tp.apply(t, bound)
	t.Logf("repair of a flushed %d-element map: %v", n, time.Since(start))
	if p := tp.plan(t, bound); !p.Empty() {
		t.Errorf("Plan after repair = %v, want empty", p)
	}
	if st := tp.observed(t); len(st.Forwards) != len(bound.Forwards) {
		t.Errorf("Observed %d forwards after repair, want %d", len(st.Forwards), len(bound.Forwards))
	}
}
