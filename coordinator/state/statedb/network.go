package statedb

import (
	"slices"

	corpusv1 "corpus/proto/corpus/v1"
)

// UsedPorts returns the node ports in use on a node: NAT ports of its
// guests (old copies of migrating guests included), its TCP routes, and
// the node's reserved ports.
func (v *Snap) UsedPorts(node *corpusv1.Node) map[int32]string {
	used := map[int32]string{}
	for _, p := range node.GetReservedPorts() {
		used[p] = "reserved by the node (proxy listener)"
	}
	for _, g := range append(v.GuestsOnNode(node.GetId()), v.GuestsLeaving(node.GetId())...) {
		for _, p := range g.GetSpec().GetPorts() {
			used[p.HostPort] = "guest " + g.Name + " (nat)"
		}
		for _, r := range v.RoutesOfGuest(g.Id) {
			if r.Is(corpusv1.RouteTCP) {
				used[r.ListenPort] = "tcp route to guest " + g.Name
			}
		}
	}
	return used
}

// Route returns the route with that id, or nil.
func (v *Snap) Route(id string) *corpusv1.Route {
	return first[*corpusv1.Route](v, TableRoutes, "id", id)
}

// RouteByDomain returns the http route of a domain, or nil.
func (v *Snap) RouteByDomain(domain string) *corpusv1.Route {
	return first[*corpusv1.Route](v, TableRoutes, "domain", domain)
}

// Routes returns every route, http by domain then tcp by port.
func (v *Snap) Routes() []*corpusv1.Route {
	out := all[*corpusv1.Route](v, TableRoutes, "id")
	slices.SortFunc(out, func(a, b *corpusv1.Route) int {
		switch {
		case a.Kind != b.Kind:
			return cmpString(a.Kind, b.Kind)
		case a.Domain != b.Domain:
			return cmpString(a.Domain, b.Domain)
		}
		return int(a.ListenPort - b.ListenPort)
	})
	return out
}

// RoutesOfGuest returns the routes pointing at a guest.
func (v *Snap) RoutesOfGuest(guestID string) []*corpusv1.Route {
	return all[*corpusv1.Route](v, TableRoutes, "guest", guestID)
}

// RoutesOnNode returns the routes to the guests placed on a node, and to
// the old copies of guests migrating away from it (they serve until the
// new copy runs).
func (v *Snap) RoutesOnNode(nodeID string) []*corpusv1.Route {
	multi := v.envRoutes(nodeID)
	var out []*corpusv1.Route
	for _, g := range append(v.GuestsOnNode(nodeID), v.GuestsLeaving(nodeID)...) {
		for _, r := range v.RoutesOfGuest(g.Id) {
			if !slices.ContainsFunc(multi, func(m *corpusv1.Route) bool { return m.Id == r.Id }) {
				out = append(out, r)
			}
		}
	}
	return append(out, multi...)
}

// PortUse says who publishes a node port.
type PortUse struct {
	Port  int32
	Owner string // "guest web (nat)", "route tcp/5432 -> db", "reserved"
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
