package nat

import (
	"bytes"
	"maps"
	"slices"
)

// Plan is the difference between what corpus's chains and table hold and
// what a Desired asks for, as Apply would write it. The caller owns it.
type Plan struct {
	// Restore is the input for iptables-restore --noflush: per table, the
	// chains to create or rewrite with their rules. Empty when the chains
	// already match.
	Restore []byte
	// Cleanup is a batch of its own that flushes and deletes
	// StaleChains, written after Restore and the jumps: a foreign rule
	// still jumping to a stale chain fails it, and only it.
	Cleanup []byte
	// NewChains are the chains Restore creates.
	NewChains []Chain
	// Added and Deleted count the rules Restore writes and removes.
	Added, Deleted int
	// StaleChains are chains under the prefix that corpus no longer
	// writes (an earlier version's PREROUTING, OUTPUT and DNAT chains);
	// Cleanup deletes them, after their jumps are deleted.
	StaleChains []Chain
	// DeleteJumps are duplicate, outdated or stale jumps to corpus's
	// chains; InsertJumps are missing ones, inserted at the top of their
	// chain.
	DeleteJumps, InsertJumps []Jump

	// Table is set when the forwards' nftables table is made anew (and
	// every forward written): it was missing, or its chains, rules or maps
	// were not as corpus writes them.
	Table bool
	// AddForwards and DeleteForwards are the map elements the change
	// writes and deletes; a forward whose guest changes is in both, an
	// element corpus would not have written is deleted but not listed.
	AddForwards, DeleteForwards []Forward
	// ReadTable and ReadChains are set when the table, or the iptables
	// chains, were read back: the ruleset generation moved since this
	// NAT last wrote or read them (someone changed the ruleset, or it
	// had not looked yet). Otherwise the plan was made from what it
	// knew, after one small netlink request.
	ReadTable, ReadChains bool

	table              observedTable // what the plan was made from
	addElems, delElems [numMaps][]element
}

// Empty reports whether the plan changes nothing.
func (p *Plan) Empty() bool {
	return len(p.Restore) == 0 && len(p.Cleanup) == 0 && len(p.DeleteJumps) == 0 && len(p.InsertJumps) == 0 && !p.Table && p.elementsChanged() == 0
}

// RestoreLines is the number of lines in Restore.
func (p *Plan) RestoreLines() int { return bytes.Count(p.Restore, []byte("\n")) }

// elementsChanged counts the map elements the plan adds and deletes.
func (p *Plan) elementsChanged() int {
	n := 0
	for m := range numMaps {
		n += len(p.addElems[m]) + len(p.delElems[m])
	}
	return n
}

// planTable adds to p the change that makes the table o publish want.
func (p *Plan) planTable(want elements, o observedTable) {
	p.table = o
	p.ReadTable = o.read
	have := o.elems
	if !o.whole {
		p.Table = true
		have = newElements(0)
	}
	p.delElems, p.addElems = diffElements(have, want)
	for m := range numMaps {
		for _, e := range p.addElems[m] {
			f, _ := decodeForward(m, e.key, e.val)
			p.AddForwards = append(p.AddForwards, f)
		}
		for _, e := range p.delElems[m] {
			if f, ok := decodeForward(m, e.key, e.val); ok {
				p.DeleteForwards = append(p.DeleteForwards, f)
			}
		}
	}
	slices.SortFunc(p.AddForwards, compareForwards)
	slices.SortFunc(p.DeleteForwards, compareForwards)
}

// result returns what the table holds once p is written. It takes over
// the elements p was made from.
func (p *Plan) result() *observedTable {
	r := observedTable{exists: true, whole: true, elems: p.table.elems}
	if p.Table || r.elems[0] == nil {
		r.elems = newElements(0)
	}
	for m := range numMaps {
		for _, e := range p.delElems[m] {
			delete(r.elems[m], e.key)
		}
		for _, e := range p.addElems[m] {
			r.elems[m][e.key] = e.val
		}
	}
	return &r
}

// plan compares want (from render) with the tables read by parseSave.
func (l layout) plan(want map[Chain][]string, snaps map[string]snapshot) *Plan {
	p := &Plan{}
	var buf, cleanup bytes.Buffer
	for _, table := range tables {
		snap := snaps[table]
		var body bytes.Buffer
		var decl bytes.Buffer
		for _, c := range l.chains() {
			if c.Table != table {
				continue
			}
			have, exists := snap.chains[c.Name]
			if exists && slices.Equal(have, want[c]) {
				continue
			}
			if !exists {
				p.NewChains = append(p.NewChains, c)
			}
			// First match wins in these chains: write them whole.
			// Declaring an existing chain in a --noflush batch flushes
			// it, in the same commit as the new rules.
			decl.WriteString(":" + c.Name + " - [0:0]\n")
			for _, r := range want[c] {
				body.WriteString("-A " + c.Name + " " + r + "\n")
			}
			p.Deleted += len(have)
			p.Added += len(want[c])
		}
		var stale []string
		for _, name := range slices.Sorted(maps.Keys(snap.chains)) {
			if !slices.Contains(l.chains(), Chain{table, name}) {
				stale = append(stale, name)
				p.StaleChains = append(p.StaleChains, Chain{table, name})
				p.Deleted += len(snap.chains[name])
			}
		}
		if decl.Len() > 0 || body.Len() > 0 {
			buf.WriteString("*" + table + "\n")
			buf.Write(decl.Bytes())
			buf.Write(body.Bytes())
			buf.WriteString("COMMIT\n")
		}
		if len(stale) > 0 {
			cleanup.WriteString("*" + table + "\n")
			// Flushed before any is deleted: they jump to each other.
			for _, name := range stale {
				cleanup.WriteString("-F " + name + "\n")
			}
			for _, name := range stale {
				cleanup.WriteString("-X " + name + "\n")
			}
			cleanup.WriteString("COMMIT\n")
		}

		for _, builtin := range builtins[table] {
			bc := Chain{table, builtin}
			i := slices.IndexFunc(l.jumps, func(j Jump) bool { return j.Chain == bc })
			kept := false
			for _, j := range snap.jumps {
				if j.Chain != bc {
					continue
				}
				if i >= 0 && !kept && j.Rule == l.jumps[i].Rule {
					kept = true
					continue
				}
				p.DeleteJumps = append(p.DeleteJumps, j)
			}
			if i >= 0 && !kept {
				p.InsertJumps = append(p.InsertJumps, l.jumps[i])
			}
		}
	}
	p.Restore, p.Cleanup = buf.Bytes(), cleanup.Bytes()
	return p
}
