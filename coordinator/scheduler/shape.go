package scheduler

import (
	"sort"

	"corpus/coordinator/fit"
)

// Placing by shape. Where a guest has no ports and no project (nothing
// counts guests by zone or environment), only a node's capacity and what
// it holds decide whether it takes the guest and how it ranks: nodes of
// one shape are alike but for their names. A pass then checks one node
// of each shape, the first by name, instead of every node: on 5,000 nodes
// that are mostly empty, or full, a handful of shapes. The decision is
// the one the scan over every node makes (TestPlaceByShapeAsScan).

// byShape turns placing by shape on (the tests compare it with the scan).
var byShape = true

// shape is what decides, for a guest without ports, whether a node takes
// it and how the node ranks, but for its name.
type shape struct {
	capMem, capCPU, capDisk    int64
	usedMem, usedCPU, usedDisk int64
	// noIDRange is set on a node whose guest id ranges are all taken.
	// Of a node's drivers only those that run guests in user namespaces
	// of the node's ids keep ranges, all of one pool (the host's
	// subordinate ids): a kind's driver there has either none or these.
	noIDRange bool
}

func shapeOf(c *Candidate) shape {
	capy, used := c.Node.GetCapacity(), c.Allocated
	var ranges uint32
	for _, d := range c.Node.GetDrivers() {
		ranges = max(ranges, d.GetIdRanges())
	}
	return shape{
		capMem: capy.GetMemoryBytes(), capCPU: capy.GetCpuMillis(), capDisk: capy.GetDiskBytes(),
		usedMem: used.GetMemoryBytes(), usedCPU: used.GetCpuMillis(), usedDisk: used.GetDiskBytes(),
		noIDRange: ranges > 0 && c.IDRanges >= int(ranges),
	}
}

// shapes groups a kind's candidates by shape, each group in name order.
type shapes map[shape][]int

func (k *kind) shapes(cands []Candidate) shapes {
	if k.byShape == nil {
		k.byShape = shapes{}
		for _, i := range k.fit {
			k.byShape.add(cands, i)
		}
	}
	return k.byShape
}

func (s shapes) add(cands []Candidate, i int) {
	key := shapeOf(&cands[i])
	g := s[key]
	at := sort.Search(len(g), func(j int) bool { return cands[g[j]].Node.Name >= cands[i].Node.Name })
	s[key] = append(g[:at], append([]int{i}, g[at:]...)...)
}

// remove takes candidate i out of the group of shape key, and says
// whether it was in it.
func (s shapes) remove(cands []Candidate, i int, key shape) bool {
	g := s[key]
	at := sort.Search(len(g), func(j int) bool { return cands[g[j]].Node.Name >= cands[i].Node.Name })
	if at == len(g) || g[at] != i {
		return false
	}
	if g = append(g[:at], g[at+1:]...); len(g) == 0 {
		delete(s, key)
	} else {
		s[key] = g
	}
	return true
}

// shapeFits says whether placing by shape decides for this guest.
func shapeFits(ask Ask) bool {
	return byShape && len(ask.ZoneLoad) == 0 && len(ask.NodeLoad) == 0 && len(ask.Guest.GetSpec().GetPorts()) == 0
}

// placeByShape is place over one node of each shape. The counts of the
// nodes short of room are those of every node of a shape that is.
func placeByShape(ask Ask, cands []Candidate, k *kind) (best *Candidate, short map[string]int) {
	spec := ask.Guest.GetSpec()
	var bestRank rank
	for _, g := range k.shapes(cands) {
		c := &cands[g[0]]
		// No ports: of the driver RoomUnfit reads only its id ranges.
		if why := fit.RoomUnfit(c.Node, fit.DriverOn(c.Node, spec.GetDriver()), c.Allocated, nil, c.IDRanges, spec); why != "" {
			if short == nil {
				short = map[string]int{}
			}
			short[why] += len(g)
			continue
		}
		r := rank{free: freeShare(c, spec.GetResources()), name: c.Node.Name}
		if best == nil || r.before(bestRank) {
			best, bestRank = c, r
		}
	}
	return best, short
}

// moving is called before candidate i's allocation changes; the
// returned function, after: every kind grouped by shape moves it.
func (ks *kinds) moving(i int) func() {
	before := shapeOf(&ks.cands[i])
	return func() {
		for _, k := range ks.seen {
			if k.byShape == nil {
				continue
			}
			if k.byShape.remove(ks.cands, i, before) { // else not a candidate of this kind
				k.byShape.add(ks.cands, i)
			}
		}
	}
}
