package nat

import (
	"bytes"
	"slices"
)

// Plan is the difference between what corpus's chains hold and what a
// Desired asks for, as Apply would write it. The caller owns it.
type Plan struct {
	// Restore is the input for iptables-restore --noflush: per table, the
	// chains to create, then -D lines for rules to delete and -A lines for
	// rules to append. Empty when the chains already match.
	Restore []byte
	// NewChains are the chains Restore creates.
	NewChains []Chain
	// Added and Deleted count the -A and -D lines of Restore.
	Added, Deleted int
	// DeleteJumps are duplicate or outdated jumps to corpus's chains;
	// InsertJumps are missing ones, inserted at the top of their chain.
	DeleteJumps, InsertJumps []Jump
}

// Empty reports whether the plan changes nothing.
func (p *Plan) Empty() bool {
	return len(p.Restore) == 0 && len(p.DeleteJumps) == 0 && len(p.InsertJumps) == 0
}

// RestoreLines is the number of lines in Restore.
func (p *Plan) RestoreLines() int { return bytes.Count(p.Restore, []byte("\n")) }

// plan compares want (from render) with the tables read by parseSave.
func (l layout) plan(want map[Chain][]string, snaps map[string]snapshot) *Plan {
	p := &Plan{}
	var buf bytes.Buffer
	for _, table := range tables {
		snap := snaps[table]
		var body bytes.Buffer
		var decl bytes.Buffer
		for _, c := range l.chains() {
			if c.Table != table {
				continue
			}
			have, exists := snap.chains[c.Name]
			if !exists {
				decl.WriteString(":" + c.Name + " - [0:0]\n")
				p.NewChains = append(p.NewChains, c)
			}
			if l.ordered(c) && exists && !slices.Equal(have, want[c]) {
				// First match wins in a filter chain: rewrite it whole.
				// Declaring an existing chain in a --noflush batch
				// flushes it, in the same commit as the new rules.
				decl.WriteString(":" + c.Name + " - [0:0]\n")
				for _, r := range want[c] {
					body.WriteString("-A " + c.Name + " " + r + "\n")
				}
				p.Deleted += len(have)
				p.Added += len(want[c])
				continue
			}
			del, add := diffRules(have, want[c])
			for _, r := range del {
				body.WriteString("-D " + c.Name + " " + r + "\n")
			}
			for _, r := range add {
				body.WriteString("-A " + c.Name + " " + r + "\n")
			}
			p.Deleted += len(del)
			p.Added += len(add)
		}
		if decl.Len() > 0 || body.Len() > 0 {
			buf.WriteString("*" + table + "\n")
			buf.Write(decl.Bytes())
			buf.Write(body.Bytes())
			buf.WriteString("COMMIT\n")
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
	p.Restore = buf.Bytes()
	return p
}

// diffRules returns the rules of have to delete (every copy beyond the one
// wanted, and every rule not wanted) and the rules of want to append, each
// in the order they appear.
func diffRules(have, want []string) (del, add []string) {
	count := make(map[string]int, len(have))
	for _, r := range have {
		count[r]++
	}
	for _, r := range want {
		if count[r] > 0 {
			count[r]--
			continue
		}
		add = append(add, r)
	}
	for _, r := range have {
		if count[r] > 0 {
			count[r]--
			del = append(del, r)
		}
	}
	return del, add
}
