// Package scheduler decides which node runs each guest. Place is a pure
// function over a view of nodes and their allocations; Loop runs it on the
// leader whenever the state changes and commits placements through Raft.
package scheduler

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// Candidate is a node with what is already allocated on it.
type Candidate struct {
	Node      *corpusv1.Node
	Allocated *corpusv1.Resources
	// UsedPorts are the node ports already published on the node.
	UsedPorts map[int32]string
}

// Decision is the outcome of placing one guest: a node id, or a reason
// why no node fits.
type Decision struct {
	NodeID string
	Reason string
}

// Place picks the node for guest among candidates. Nodes are filtered
// (ready, not draining, driver present and healthy, image offered, free
// memory/cpu/disk) and the remaining one with the most free memory share
// wins (spread), ties broken by name so the choice is deterministic. When
// nothing fits, Reason counts the nodes each filter rejected.
func Place(guest *corpusv1.Guest, candidates []Candidate) Decision {
	spec := guest.GetSpec()
	need := spec.GetResources()
	var (
		rejected = map[string]int{}
		best     *Candidate
		bestFree float64
	)
	for i := range candidates {
		c := &candidates[i]
		if why := filter(c, spec, need); why != "" {
			rejected[why]++
			continue
		}
		free := freeShare(c, need)
		if best == nil || free > bestFree || (free == bestFree && c.Node.Name < best.Node.Name) {
			best, bestFree = c, free
		}
	}
	if best != nil {
		return Decision{NodeID: best.Node.Id}
	}
	if len(candidates) == 0 {
		return Decision{Reason: "no nodes are enrolled; enroll one with `corpus node token` and `corpus agent --join-token`"}
	}
	reasons := make([]string, 0, len(rejected))
	for why, n := range rejected {
		noun := "nodes"
		if n == 1 {
			noun = "node"
		}
		reasons = append(reasons, fmt.Sprintf("%d %s %s", n, noun, why))
	}
	sort.Strings(reasons)
	return Decision{Reason: fmt.Sprintf("no node fits (%d considered): %s", len(candidates), strings.Join(reasons, "; "))}
}

func filter(c *Candidate, spec *corpusv1.GuestSpec, need *corpusv1.Resources) string {
	n := c.Node
	switch {
	case n.Status != state.NodeReady:
		return "not ready (" + n.Status + ")"
	case n.Mode == "drain":
		return "draining"
	}
	var drv *corpusv1.DriverInfo
	for _, d := range n.Drivers {
		if d.Name == spec.GetDriver() {
			drv = d
		}
	}
	switch {
	case drv == nil:
		return "without driver " + spec.GetDriver()
	case !drv.Healthy:
		return "with driver " + spec.GetDriver() + " unhealthy"
	case len(drv.Images) > 0 && !slices.Contains(drv.Images, spec.GetImage()):
		return "without image " + spec.GetImage()
	}
	capy, alloc := n.GetCapacity(), c.Allocated
	switch {
	case need.GetMemoryBytes() > capy.GetMemoryBytes()-alloc.GetMemoryBytes():
		return "short of memory"
	case need.GetCpuMillis() > capy.GetCpuMillis()-alloc.GetCpuMillis():
		return "short of cpu"
	case need.GetDiskBytes() > capy.GetDiskBytes()-alloc.GetDiskBytes():
		return "short of disk"
	}
	if ports := spec.GetPorts(); len(ports) > 0 {
		if why := state.PortConflict(n, c.UsedPorts, ports); why != "" {
			return "where " + why
		}
	}
	return ""
}

// freeShare is the share of the node's memory left after placing need.
func freeShare(c *Candidate, need *corpusv1.Resources) float64 {
	total := c.Node.GetCapacity().GetMemoryBytes()
	if total <= 0 {
		return 0
	}
	return float64(total-c.Allocated.GetMemoryBytes()-need.GetMemoryBytes()) / float64(total)
}

// Allocated sums the resources of guests. Applied to the guests placed on
// a node it counts those being deleted too: they hold their place until
// their agent confirms they are gone.
func Allocated(guests []*corpusv1.Guest) *corpusv1.Resources {
	sum := &corpusv1.Resources{}
	for _, g := range guests {
		r := g.GetSpec().GetResources()
		sum.MemoryBytes += r.GetMemoryBytes()
		sum.CpuMillis += r.GetCpuMillis()
		sum.DiskBytes += r.GetDiskBytes()
	}
	return sum
}
