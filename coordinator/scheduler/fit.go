// Package scheduler decides which node runs each guest. Place is a pure
// function over a view of nodes and their allocations; Plan decides a
// whole pass over a snapshot of the state; Loop runs passes on the leader
// whenever the state changes and commits each pass's plan through Raft as
// one entry, which re-checks every placement against the latest state.
package scheduler

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/fit"
	"corpus/coordinator/idrange"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// Candidate is a node with what is already allocated on it.
type Candidate struct {
	Node      *corpusv1.Node
	Allocated *corpusv1.Resources
	// UsedPorts are the node ports already published on the node.
	UsedPorts map[int32]string
	// IDRanges is how many of the node's guest id ranges are taken.
	IDRanges int
}

// candidate is node n with what the state says it holds; ports tells
// whether its published ports are worked out too.
func candidate(view *state.Snap, n *corpusv1.Node, ports bool) Candidate {
	c := Candidate{Node: n}
	c.Allocated, c.IDRanges = view.NodeHolds(n.Id)
	if ports {
		c.UsedPorts = view.UsedPorts(n)
	}
	return c
}

// placed counts guest g, just placed on c, in what c holds.
func (c *Candidate) placed(g *corpusv1.Guest) {
	alloc := proto.Clone(c.Allocated).(*corpusv1.Resources)
	fit.Add(alloc, g.GetSpec().GetResources())
	c.Allocated = alloc
	if idrange.Capacity(fit.DriverOn(c.Node, g.GetSpec().GetDriver()), g.GetSpec()) > 0 {
		c.IDRanges++
	}
}

// Ask is one guest to place and what the placement needs to know of it.
type Ask struct {
	Guest *corpusv1.Guest
	// Env is the project environment the guest runs ("" outside
	// projects): only nodes in that mode take it.
	Env string
	// ZoneLoad counts, by zone, the guests of the guest's project already
	// placed there: the guest goes to the least loaded zone that fits.
	ZoneLoad map[string]int
	// NodeLoad counts, by node id, the instances of the guest's project
	// environment already there: among the nodes of a zone the guest goes
	// to the one with fewest, so an environment's instances spread.
	NodeLoad map[string]int
}

// Decision is the outcome of placing one guest: a node id, or a reason
// why no node fits.
type Decision struct {
	NodeID string
	Reason string
}

// Place picks the node for a guest among candidates. Nodes are filtered
// (fit.Unfit: ready, not draining, eligible, in the guest's environment,
// carrying the labels it requires, driver present and healthy, image
// offered, free memory/cpu/disk, ports and id ranges). Of the nodes that
// fit, the ones in the zone holding the fewest guests of the guest's
// project come first (spread across failure domains), then those holding
// the fewest instances of its environment; among those the guest is
// bin-packed: the node left with the smallest free share of memory and
// cpu wins, ties broken by name so the choice is deterministic. When
// nothing fits, Reason counts the nodes each filter rejected.
func Place(ask Ask, candidates []Candidate) Decision {
	return place(ask, candidates, kindIn(candidates, ask.Guest.GetSpec(), ask.Env))
}

// place is Place with the candidates that take the guest's kind worked
// out already.
func place(ask Ask, candidates []Candidate, k *kind) Decision {
	var best *Candidate
	var short map[string]int // rejected for want of room
	if k.pass && shapeFits(ask) {
		best, short = placeByShape(ask, candidates, k)
	} else {
		best, short = placeByScan(ask, candidates, k)
	}
	if best != nil {
		return Decision{NodeID: best.Node.Id}
	}
	if len(candidates) == 0 {
		return Decision{Reason: "no nodes are enrolled; enroll one with `corpus node token` and `corpus agent --join-token`"}
	}
	reasons := make([]string, 0, len(k.rejected)+len(short))
	for _, rejected := range []map[string]int{k.rejected, short} {
		for why, n := range rejected {
			noun := "nodes"
			if n == 1 {
				noun = "node"
			}
			reasons = append(reasons, fmt.Sprintf("%d %s %s", n, noun, why))
		}
	}
	sort.Strings(reasons)
	return Decision{Reason: fmt.Sprintf("no node fits (%d considered): %s", len(candidates), strings.Join(reasons, "; "))}
}

// placeByScan ranks every candidate of the kind that has room.
func placeByScan(ask Ask, candidates []Candidate, k *kind) (best *Candidate, short map[string]int) {
	spec := ask.Guest.GetSpec()
	var bestRank rank
	for j, i := range k.fit {
		c := &candidates[i]
		if why := fit.RoomUnfit(c.Node, k.drivers[j], c.Allocated, c.UsedPorts, c.IDRanges, spec); why != "" {
			if short == nil {
				short = map[string]int{}
			}
			short[why]++
			continue
		}
		r := rank{zoneLoad: ask.ZoneLoad[c.Node.Labels[fit.LabelZone]], nodeLoad: ask.NodeLoad[c.Node.Id], free: freeShare(c, spec.GetResources()), name: c.Node.Name}
		if best == nil || r.before(bestRank) {
			best, bestRank = c, r
		}
	}
	return best, short
}

// kind is what a set of candidates says of one kind of guest whatever
// the nodes hold (fit.KindUnfit): those that take it, with their
// driver for it, and why the others do not.
type kind struct {
	fit      []int // indices of candidates
	drivers  []*corpusv1.DriverInfo
	rejected map[string]int
	// pass is set on the kinds a pass keeps (kinds.of): they may be
	// placed by shape, byShape grouping their candidates (built on first
	// use, kept up to date by kinds.moving).
	pass    bool
	byShape shapes
}

func kindIn(candidates []Candidate, spec *corpusv1.GuestSpec, env string) *kind {
	k := &kind{rejected: map[string]int{}}
	for i := range candidates {
		drv, why := fit.KindUnfit(candidates[i].Node, spec, env)
		if why != "" {
			k.rejected[why]++
			continue
		}
		k.fit = append(k.fit, i)
		k.drivers = append(k.drivers, drv)
	}
	return k
}

// kinds remembers the kinds of guest one pass met, over the pass's
// candidates: nodes change only in what they hold during a pass, so a
// pass placing many guests of one kind checks each node's kind once and
// then only its room.
type kinds struct {
	cands []Candidate
	seen  map[string]*kind
}

func (ks *kinds) of(spec *corpusv1.GuestSpec, env string) *kind {
	key := fit.KindKey(spec, env)
	k := ks.seen[key]
	if k == nil {
		k = kindIn(ks.cands, spec, env)
		k.pass = true
		ks.seen[key] = k
	}
	return k
}

// rank orders the nodes that fit a guest: fewer guests of its project in
// the node's zone, then fewer instances of its environment on the node,
// then less left free (bin-packing), then name.
type rank struct {
	zoneLoad int
	nodeLoad int
	free     float64
	name     string
}

func (r rank) before(o rank) bool {
	switch {
	case r.zoneLoad != o.zoneLoad:
		return r.zoneLoad < o.zoneLoad
	case r.nodeLoad != o.nodeLoad:
		return r.nodeLoad < o.nodeLoad
	case r.free != o.free:
		return r.free < o.free
	}
	return r.name < o.name
}

// freeShare is the mean share of the node's memory and cpu left after
// placing need.
func freeShare(c *Candidate, need *corpusv1.Resources) float64 {
	capy, alloc := c.Node.GetCapacity(), c.Allocated
	share := func(total, used, want int64) float64 {
		if total <= 0 {
			return 0
		}
		return float64(total-used-want) / float64(total)
	}
	return (share(capy.GetMemoryBytes(), alloc.GetMemoryBytes(), need.GetMemoryBytes()) +
		share(capy.GetCpuMillis(), alloc.GetCpuMillis(), need.GetCpuMillis())) / 2
}
