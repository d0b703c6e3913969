package l2filter

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"corpus/netns/internal/nftconn"
)

// Apply makes the table hold exactly ports, and its chain and sets be as
// corpus writes them, changing only what differs (see the package
// comment), and says what it changed. It returns ErrInvalid or
// ErrConflict for bad ports and changes nothing then. The change is one
// nftables transaction: when it fails nothing changed, and the next
// Apply starts again from what is there.
func (f *Filter) Apply(ctx context.Context, ports []Port) (Changes, error) {
	if err := ctx.Err(); err != nil {
		return Changes{}, err
	}
	if err := validatePorts(ports); err != nil {
		return Changes{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	start := time.Now()
	c, err := nftconn.Dial(ctx)
	if err != nil {
		return Changes{}, err
	}
	defer c.CloseLasting()
	l := newLayout(f.table)
	have, err := read(c, l)
	if err != nil {
		return Changes{}, err
	}
	want := wanted(ports)
	var ch Changes
	if !have.whole {
		if have.exists {
			c.DelTable(l.table)
		}
		c.AddTable(l.table)
		for _, s := range l.sets {
			if err := c.AddSet(s, nil); err != nil {
				return Changes{}, fmt.Errorf("adding set %s: %w", s.Name, err)
			}
		}
		c.AddChain(l.chain)
		f.addRules(c, l)
		for i, s := range l.sets {
			if err := addElements(c, s, slices.Collect(maps.Values(want.keys[i]))); err != nil {
				return Changes{}, err
			}
		}
		ch.Table = true
		for _, p := range ports {
			ch.Added = append(ch.Added, p.Iface)
		}
	} else {
		if !nftconn.SameRules(nftables.TableFamilyBridge, have.rules, rules(f.prefix)) {
			c.FlushChain(l.chain)
			f.addRules(c, l)
			ch.Rules = true
		}
		if err := diffElements(c, l, have, want, &ch); err != nil {
			return Changes{}, err
		}
	}
	if !ch.Changed() {
		return ch, nil
	}
	before, genErr := nftconn.Generation(ctx)
	if err := c.Flush(); err != nil {
		return Changes{}, fmt.Errorf("writing table bridge %s: %w", f.table, err)
	}
	if after, err := nftconn.Generation(ctx); genErr == nil && err == nil {
		ch.Before, ch.After = before, after
	}
	slices.Sort(ch.Added)
	f.log.Info("layer-2 filter changed", "table", f.table, "ports", len(ports), "made_table", ch.Table,
		"rewrote_rules", ch.Rules, "added", ch.Added, "replaced", ch.Replaced, "removed", ch.Removed,
		"took", time.Since(start))
	return ch, nil
}

// Observed reads what the table holds now.
func (f *Filter) Observed(ctx context.Context) (State, error) {
	if err := ctx.Err(); err != nil {
		return State{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := nftconn.Dial(ctx)
	if err != nil {
		return State{}, err
	}
	defer c.CloseLasting()
	have, err := read(c, newLayout(f.table))
	if err != nil {
		return State{}, err
	}
	st := State{Exists: have.exists, Rules: len(have.rules)}
	for _, r := range have.rules {
		for _, e := range r.Exprs {
			if n, ok := e.(*expr.Counter); ok {
				st.Dropped += n.Packets
			}
		}
	}
	byIface := map[string]*Port{}
	port := func(name string) *Port {
		if byIface[name] == nil {
			byIface[name] = &Port{Iface: name}
		}
		return byIface[name]
	}
	for name := range have.keys[0] {
		port(name)
	}
	for name, keys := range have.keys[1] {
		port(name).MAC = keyMAC(keys[0])
	}
	for name, keys := range have.keys[2] {
		port(name).Addr = keyAddr(keys[0])
	}
	for _, p := range byIface {
		st.Ports = append(st.Ports, *p)
	}
	sortPorts(st.Ports)
	return st, nil
}

// Remove deletes the table with everything in it. A table that is not
// there is not an error.
func (f *Filter) Remove(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	removed, err := nftconn.DeleteTable(ctx, newLayout(f.table).table)
	if removed {
		f.log.Info("layer-2 filter removed", "table", f.table)
	}
	return err
}

// observed is what read found.
type observed struct {
	exists bool
	// whole: the table, its chain and its sets are as corpus writes
	// them (the rules and elements may still differ).
	whole bool
	rules []*nftables.Rule
	// keys holds each set's elements (ports, macs, addrs) by the
	// interface name they start with.
	keys [3]map[string][][]byte
}

// read observes the table; rules and elements only when it is whole.
func read(c *nftables.Conn, l layout) (observed, error) {
	var o observed
	t, err := nftconn.ReadTable(c, l.table)
	if err != nil || !t.Exists {
		return o, err
	}
	o.exists = true
	if len(t.Chains) != 1 || !nftconn.SameChain(t.Chains[0], l.chain) {
		return o, nil
	}
	if ok, err := nftconn.HasSets(c, l.table, l.sets); err != nil || !ok {
		return o, err
	}
	o.whole = true
	if o.rules, err = c.GetRules(l.table, l.chain); err != nil {
		return o, fmt.Errorf("reading rules of chain %s: %w", l.chain.Name, err)
	}
	for i, s := range l.sets {
		elems, err := c.GetSetElements(s)
		if err != nil {
			return o, fmt.Errorf("reading set %s: %w", s.Name, err)
		}
		o.keys[i] = make(map[string][][]byte, len(elems))
		for _, e := range elems {
			name := keyIface(e.Key)
			o.keys[i][name] = append(o.keys[i][name], e.Key)
		}
	}
	return o, nil
}

func (f *Filter) addRules(c *nftables.Conn, l layout) {
	for _, exprs := range rules(f.prefix) {
		c.AddRule(&nftables.Rule{Table: l.table, Chain: l.chain, Exprs: exprs})
	}
}

// desired is the elements of each set, by interface name.
type desired struct {
	keys [3]map[string][]byte
}

func wanted(ports []Port) desired {
	var w desired
	for i := range w.keys {
		w.keys[i] = make(map[string][]byte, len(ports))
	}
	for _, p := range ports {
		w.keys[0][p.Iface] = portKey(p)
		w.keys[1][p.Iface] = macKey(p)
		w.keys[2][p.Iface] = addrKey(p)
	}
	return w
}

// diffElements adds the elements that are missing and deletes those not
// wanted, set by set, and names the ports that changed.
func diffElements(c *nftables.Conn, l layout, have observed, w desired, ch *Changes) error {
	touched := map[string]bool{}
	known := map[string]bool{}
	for i, s := range l.sets {
		var add, del [][]byte
		for name, keys := range have.keys[i] {
			known[name] = true
			for _, k := range keys {
				if !bytes.Equal(k, w.keys[i][name]) {
					del = append(del, k)
					touched[name] = true
				}
			}
		}
		for name, k := range w.keys[i] {
			if !slices.ContainsFunc(have.keys[i][name], func(h []byte) bool { return bytes.Equal(h, k) }) {
				add = append(add, k)
				touched[name] = true
			}
		}
		// Deleted first: a port's new key in a set never meets its old
		// one, whatever the set's kind.
		if err := deleteElements(c, s, del); err != nil {
			return err
		}
		if err := addElements(c, s, add); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(touched)) {
		_, wanted := w.keys[0][name]
		switch {
		case !wanted:
			ch.Removed = append(ch.Removed, name)
		case known[name]:
			ch.Replaced = append(ch.Replaced, name)
		default:
			ch.Added = append(ch.Added, name)
		}
	}
	return nil
}

func addElements(c *nftables.Conn, s *nftables.Set, keys [][]byte) error {
	return nftconn.AddElements(c, s, elements(keys))
}

func deleteElements(c *nftables.Conn, s *nftables.Set, keys [][]byte) error {
	return nftconn.DeleteElements(c, s, elements(keys))
}

func elements(keys [][]byte) []nftables.SetElement {
	out := make([]nftables.SetElement, len(keys))
	for i, k := range keys {
		out[i] = nftables.SetElement{Key: k}
	}
	return out
}
