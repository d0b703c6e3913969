package statedb

import (
	"sort"

	"corpus/coordinator/fit"
	"corpus/coordinator/idrange"
	corpusv1 "corpus/proto/corpus/v1"
)

// GuestsLeaving returns the guests migrating away from a node whose old
// copy still runs there, sorted by name.
func (v *Snap) GuestsLeaving(nodeID string) []*corpusv1.Guest {
	out := all[*corpusv1.Guest](v, TableGuests, "prev", nodeID)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// NodeIDRanges returns the guest id ranges taken on a node (see
// idrange.Used).
func (v *Snap) NodeIDRanges(nodeID string) map[uint32]bool {
	return idrange.Used(all[*corpusv1.Guest](v, TableGuests, "node", nodeID), all[*corpusv1.Guest](v, TableGuests, "prev", nodeID))
}

// NodeAllocated is what a node holds: its guests and the old copies of
// guests migrating away from it.
func (v *Snap) NodeAllocated(nodeID string) *corpusv1.Resources {
	alloc, _ := v.NodeHolds(nodeID)
	return alloc
}

// NodeHolds is NodeAllocated and how many guest id ranges are taken on
// the node, read in one pass.
func (v *Snap) NodeHolds(nodeID string) (alloc *corpusv1.Resources, idRanges int) {
	// Sums need no order: the indexes as they come.
	on, leaving := all[*corpusv1.Guest](v, TableGuests, "node", nodeID), all[*corpusv1.Guest](v, TableGuests, "prev", nodeID)
	return fit.Allocated(on, leaving), idrange.Taken(on, leaving)
}

// GuestProjects maps the ids of project guests to their project
// environment, and those of service guests to "service:NAME" and the
// service's environment (placed by node mode as projects are).
func (v *Snap) GuestProjects() map[string]ProjectRef {
	out := map[string]ProjectRef{}
	for _, p := range v.Projects() {
		for _, e := range p.Envs {
			for _, in := range Instances(e) {
				out[in.GuestID] = ProjectRef{Project: p.Name, Env: e.Name, Instance: in.Index}
			}
		}
	}
	for _, s := range v.Services() {
		if s.GuestId != "" {
			out[s.GuestId] = ProjectRef{Project: "service:" + s.Name, Env: s.Env}
		}
	}
	return out
}

// Stateless reports whether a guest has no volume: it can run on any node.
func (v *Snap) Stateless(g *corpusv1.Guest) bool {
	return g.GetSpec().GetVolume() == nil && v.VolumeOfGuest(g.Id) == nil
}

// AddressesOn returns the guest addresses in use on a node: its guests'
// and those of old copies still running there.
func (v *Snap) AddressesOn(nodeID string) []string {
	var out []string
	for _, g := range v.GuestsOnNode(nodeID) {
		out = append(out, g.Address)
	}
	for _, g := range v.GuestsLeaving(nodeID) {
		out = append(out, g.PreviousAddress)
	}
	return out
}

// ProjectRef names the project environment a guest runs.
type ProjectRef struct {
	Project string
	Env     string
	// Instance is the guest's index among its environment's instances.
	Instance uint32
}
