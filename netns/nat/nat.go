package nat

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// NAT programs corpus's NAT chains and its forwards' table in the calling
// thread's network namespace. Its methods are safe for concurrent use;
// they run one at a time.
type NAT struct {
	l   layout
	log *slog.Logger
	ipt *iptablesCmd
	nft *nftTable

	// snaps is what iptables-save showed of corpus's chains when the
	// ruleset generation was snapsGen, kept while it stays: with the
	// nf_tables backend every iptables change moves it too. Nil when
	// unknown, and always with the legacy backend.
	snaps    map[string]snapshot
	snapsGen uint32

	mu sync.Mutex
}

// New returns a NAT for the chains under cfg.Prefix. It fails with
// ErrInvalid for a bad prefix, ErrNotSupported off Linux, or when the
// iptables tools are missing or disagree on their backend (nf_tables or
// legacy).
func New(cfg Config) (*NAT, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ipt, err := newIptables()
	if err != nil {
		return nil, err
	}
	prefix := cmp.Or(cfg.Prefix, DefaultPrefix)
	return &NAT{
		l:   newLayout(prefix),
		log: log.With("component", "nat"),
		ipt: ipt,
		nft: newNftTable(strings.ToLower(prefix)),
	}, nil
}

// Chains lists corpus's chains.
func (n *NAT) Chains() []Chain { return n.l.chains() }

// Plan reads corpus's chains and table (or knows them, see
// Plan.ReadTable) and returns what Apply(ctx, d) would change, without
// changing anything. It returns ErrInvalid or ErrConflict for a bad d.
func (n *NAT) Plan(ctx context.Context, d Desired) (*Plan, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.plan(ctx, d)
}

func (n *NAT) plan(ctx context.Context, d Desired) (*Plan, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	gen, err := n.nft.generation(ctx)
	if err != nil {
		return nil, err
	}
	snaps, readChains := n.snaps, false
	if snaps == nil || gen != n.snapsGen {
		readChains = true
		n.snaps = nil
		if snaps, err = n.read(ctx); err != nil {
			return nil, err
		}
		if after, err := n.nft.generation(ctx); err == nil && after == gen && !n.ipt.legacy {
			n.snaps, n.snapsGen = snaps, gen
		}
	}
	o, err := n.nft.current(ctx, gen)
	if err != nil {
		return nil, err
	}
	p := n.l.plan(n.l.render(d), snaps)
	p.planTable(forwardElements(d.Forwards), o)
	p.ReadChains = readChains
	return p, nil
}

// Apply makes corpus's chains hold exactly the rules d asks for, the
// built-in chains jump to them once each, and the forwards' maps hold
// exactly d's forwards, changing only what differs. It returns ErrInvalid
// or ErrConflict for a bad d, and changes nothing then. A failed batch
// changes nothing in its table (iptables-restore commits a table at once,
// and nftables a transaction); the next Apply starts again from what is
// there.
func (n *NAT) Apply(ctx context.Context, d Desired) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	start := time.Now()
	p, err := n.plan(ctx, d)
	if err != nil {
		return err
	}
	if p.Empty() {
		n.log.Debug("nat rules up to date", "forwards", len(d.Forwards), "took", time.Since(start))
		return nil
	}
	if err := n.execute(ctx, p); err != nil {
		return err
	}
	n.log.Info("nat rules changed", "forwards", len(d.Forwards), "forwards_added", len(p.AddForwards),
		"forwards_deleted", len(p.DeleteForwards), "made_table", p.Table, "read_table", p.ReadTable,
		"read_chains", p.ReadChains, "added", p.Added, "deleted", p.Deleted,
		"new_chains", len(p.NewChains), "stale_chains", len(p.StaleChains),
		"jumps_inserted", len(p.InsertJumps), "jumps_deleted", len(p.DeleteJumps), "took", time.Since(start))
	return nil
}

// execute writes the table and the iptables chains. A table made anew
// (an upgrade, a repair) goes first, so that it publishes the forwards
// before the previous version's DNAT chains go; otherwise it goes last,
// so that its write is the newest transaction and the next Apply finds
// the table, and the chains, without reading them back. The stale
// chains go last, after the jumps to them.
func (n *NAT) execute(ctx context.Context, p *Plan) error {
	nft := p.Table || p.elementsChanged() > 0
	if nft && p.Table {
		if err := n.writeTable(ctx, p); err != nil {
			return err
		}
	}
	if len(p.DeleteJumps)+len(p.Restore)+len(p.InsertJumps)+len(p.Cleanup) > 0 {
		n.snaps = nil
	}
	for _, j := range p.DeleteJumps {
		if err := n.ipt.deleteRule(j.Table, j.Name, j.Rule); err != nil {
			return err
		}
	}
	if len(p.Restore) > 0 {
		if err := n.ipt.restore(ctx, p.Restore); err != nil {
			return err
		}
	}
	for _, j := range p.InsertJumps {
		if err := n.ipt.insertRule(j.Table, j.Name, 1, j.Rule); err != nil {
			return err
		}
	}
	if len(p.Cleanup) > 0 {
		if err := n.ipt.restore(ctx, p.Cleanup); err != nil {
			return fmt.Errorf("deleting chains %v, which corpus no longer uses (remove the rules of other chains that jump to them): %w", p.StaleChains, err)
		}
	}
	if nft && !p.Table {
		return n.writeTable(ctx, p)
	}
	return nil
}

// Passed tells the NAT of a transaction of another of corpus's writers
// that leaves its chains and table alone (the layer-2 filter's, say),
// which moved the ruleset generation from before to after. When it was
// the only transaction between them (after == before+1) and the NAT knew
// the ruleset at before, it keeps what it knew: its next Apply reads
// neither its chains nor its table back.
func (n *NAT) Passed(before, after uint32) {
	if after != before+1 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.snaps != nil && n.snapsGen == before {
		n.snapsGen = after
	}
	n.nft.passed(before, after)
}

// writeTable writes the table; the chains known before it stay known
// when it was the only transaction (it leaves them alone).
func (n *NAT) writeTable(ctx context.Context, p *Plan) error {
	before, after, err := n.nft.write(ctx, p)
	if err != nil {
		n.snaps = nil
		return err
	}
	if n.snaps != nil && n.snapsGen == before && after == before+1 {
		n.snapsGen = after
	}
	return nil
}

func (n *NAT) read(ctx context.Context) (map[string]snapshot, error) {
	snaps := make(map[string]snapshot, len(tables))
	for _, t := range tables {
		data, err := n.ipt.save(ctx, t)
		if err != nil {
			return nil, err
		}
		snaps[t] = n.l.parseSave(t, data)
	}
	return snaps, nil
}

// State is what corpus's chains and table hold. The caller owns it.
type State struct {
	// Rules maps each chain under corpus's prefix that exists to its
	// rules, as iptables-save prints them after "-A <chain> ".
	Rules map[Chain][]string
	// Jumps are the rules in built-in chains that jump to corpus's chains.
	Jumps []Jump
	// Table reports whether the forwards' nftables table exists.
	Table bool
	// Forwards are read back from the table's maps when the table is as
	// corpus writes it, in the order compareForwards gives; elements
	// corpus would not have written are left out.
	Forwards []Forward
}

// RuleCount is the number of rules in corpus's chains plus the jumps.
func (s State) RuleCount() int {
	n := len(s.Jumps)
	for _, r := range s.Rules {
		n += len(r)
	}
	return n
}

// Observed reads what corpus's chains hold now.
func (n *NAT) Observed(ctx context.Context) (State, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	snaps, err := n.read(ctx)
	if err != nil {
		return State{}, err
	}
	st := State{Rules: map[Chain][]string{}}
	for _, t := range tables {
		for name, rules := range snaps[t].chains {
			st.Rules[Chain{t, name}] = rules
		}
		st.Jumps = append(st.Jumps, snaps[t].jumps...)
	}
	o, err := n.nft.read(ctx)
	if err != nil {
		return State{}, err
	}
	st.Table = o.exists
	st.Forwards = o.forwards()
	slices.SortFunc(st.Forwards, compareForwards)
	return st, nil
}

// Remove deletes the forwards' table, the jumps to corpus's chains and
// every chain under the prefix, in both iptables tables, leaving all
// other rules alone. Nothing to remove is not an error.
func (n *NAT) Remove(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.snaps = nil
	table, err := n.nft.remove(ctx)
	if err != nil {
		return err
	}
	if table {
		n.log.Info("nat table removed", "table", n.nft.name())
	}
	snaps, err := n.read(ctx)
	if err != nil {
		return err
	}
	removed := 0
	for _, t := range tables {
		for _, j := range snaps[t].jumps {
			if err := n.ipt.deleteRule(j.Table, j.Name, j.Rule); err != nil {
				return err
			}
		}
		// Flush every chain before deleting any: they jump to each other.
		names := slices.Sorted(maps.Keys(snaps[t].chains))
		for _, name := range names {
			if err := n.ipt.flushChain(t, name); err != nil {
				return err
			}
		}
		for _, name := range names {
			if err := n.ipt.deleteChain(t, name); err != nil {
				return err
			}
		}
		removed += len(names)
	}
	if removed > 0 {
		n.log.Info("nat chains removed", "chains", removed)
	}
	return nil
}

// String describes the plan in one line for logs and test failures.
func (p *Plan) String() string {
	return fmt.Sprintf("plan{read_table=%v read_chains=%v table=%v add_forwards=%d delete_forwards=%d elements=%d new_chains=%d stale_chains=%d added=%d deleted=%d insert_jumps=%d delete_jumps=%d restore_lines=%d}",
		p.ReadTable, p.ReadChains, p.Table, len(p.AddForwards), len(p.DeleteForwards), p.elementsChanged(), len(p.NewChains), len(p.StaleChains),
		p.Added, p.Deleted, len(p.InsertJumps), len(p.DeleteJumps), p.RestoreLines())
}
