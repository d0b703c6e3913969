package state

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/compat"
	"corpus/coordinator/fit"
	"corpus/coordinator/idrange"
	"corpus/coordinator/ipam"
	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// Node modes and eligibility (the API's words).
const (
	ModeDev     = corpusv1.ModeDev
	ModeStaging = corpusv1.ModeStaging
	ModeProd    = corpusv1.ModeProd
	ModeDrain   = corpusv1.ModeDrain
)

// placeBatch is what one PlaceGuests entry learns as it applies, so each
// placement does not sum a node's guests again.
type placeBatch struct {
	projects map[string]ProjectRef
	alloc    map[string]*corpusv1.Resources
	ports    map[string]map[int32]string
}

func (a *applier) placeGuests(c *corpusv1.PlaceGuests) error {
	if len(c.Placements) == 0 {
		return fmt.Errorf("no placements: %w", ErrInvalid)
	}
	b := &placeBatch{alloc: map[string]*corpusv1.Resources{}, ports: map[string]map[int32]string{}}
	applied := 0
	var last error
	for _, p := range c.Placements {
		if err := a.placeChecked(p, b); err != nil {
			last = err
			continue
		}
		applied++
	}
	if applied == 0 {
		// Nothing holds any more: write nothing, so watchers (the
		// scheduler first) are not woken to plan the same again.
		if !errors.Is(last, ErrStale) {
			last = fmt.Errorf("%w (%w)", last, ErrStale)
		}
		return fmt.Errorf("none of the %d placements holds any more: %w", len(c.Placements), last)
	}
	return nil
}

// placeChecked applies one placement of a batch after checking it against
// the state as it is now:
//
//	guest unplaced            -> placed on the node (or given the reason)
//	stateless, node down      -> moved at once (or given the reason)
//	stateless, node draining  -> migrating: the new copy is placed and the
//	                             old one runs until the new one does
//
// Anything else, or a node that no longer fits, refuses the placement.
func (a *applier) placeChecked(p *corpusv1.PlaceGuest, b *placeBatch) error {
	g, err := a.guest(func() any { return a.get(statedb.TableGuests, "id", p.GuestId) }, p.GuestId)
	if err != nil {
		return err
	}
	if p.ModifyIndex != 0 && g.ModifyIndex != p.ModifyIndex {
		return fmt.Errorf("placing guest %s: %w", g.Name, ErrStale)
	}
	if g.DesiredState == DesiredDeleted {
		return fmt.Errorf("guest %s is being deleted: %w", g.Name, ErrBadTransition)
	}
	v := a.view()
	var from *corpusv1.Node
	if g.NodeId != "" {
		from, _ = a.node(g.NodeId)
		movable := from == nil || from.Status == NodeDown || (from.Mode == ModeDrain && g.PreviousNodeId == "")
		if !movable || !v.Stateless(g) {
			return fmt.Errorf("guest %s is placed on a node it stays on: %w", g.Name, ErrBadTransition)
		}
	}
	if p.NodeId == "" {
		if from != nil && from.Status != NodeDown {
			return fmt.Errorf("guest %s: reasons are kept for guests without a running node: %w", g.Name, ErrBadTransition)
		}
		if g.PendingReason == p.Reason {
			return fmt.Errorf("guest %s: same reason: %w", g.Name, ErrStale)
		}
		g.PendingReason = p.Reason
		a.event(g, "pending", p.Reason)
		g.ModifyIndex = a.index
		a.put(statedb.TableGuests, g)
		return nil
	}
	n, err := a.node(p.NodeId)
	if err != nil {
		return err
	}
	if from != nil && from.Id == n.Id {
		return fmt.Errorf("guest %s is already on node %s: %w", g.Name, n.Name, ErrBadTransition)
	}
	if b.projects == nil {
		b.projects = v.GuestProjects()
	}
	alloc, ok := b.alloc[n.Id]
	if !ok {
		alloc = v.NodeAllocated(n.Id)
		b.alloc[n.Id] = alloc
	}
	used, ok := b.ports[n.Id]
	if !ok {
		used = v.UsedPorts(n)
		b.ports[n.Id] = used
	}
	_, ranges := v.NodeHolds(n.Id)
	if why := fit.Unfit(n, alloc, used, ranges, g.Spec, b.projects[g.Id].Env); why != "" {
		return fmt.Errorf("placing guest %s on node %s, %s: %w", g.Name, n.Name, why, ErrStale)
	}
	switch {
	case from == nil && g.NodeId != "":
		a.event(g, "rescheduled", "its node is no longer enrolled; placed on node "+n.Name)
	case from == nil:
		a.event(g, "placed", "placed on node "+n.Name)
	case from.Status == NodeDown:
		a.event(g, "rescheduled", "node "+from.Name+" is down; placed on node "+n.Name)
	case g.DesiredState == DesiredRunning:
		// Draining: the old copy keeps running until the new one does.
		g.PreviousNodeId, g.PreviousAddress, g.PreviousIdRange = from.Id, g.Address, g.IdRange
		a.event(g, "migrating", "node "+from.Name+" is draining; starting a new copy on node "+n.Name)
	default:
		a.event(g, "migrated", "node "+from.Name+" is draining; placed on node "+n.Name)
	}
	if err := a.assign(g, n, v); err != nil {
		return err
	}
	g.Observed = nil
	g.ModifyIndex = a.index
	a.put(statedb.TableGuests, g)
	fit.Add(alloc, g.GetSpec().GetResources())
	for _, port := range g.GetSpec().GetPorts() {
		used[port.HostPort] = "guest " + g.Name + " (nat)"
	}
	return nil
}

// assign puts g on node n: an address of n's subnet (unless g's driver
// there addresses guests itself), an id range of n's (when g takes
// one there), and its volume there when it has one that is on no node
// yet.
func (a *applier) assign(g *corpusv1.Guest, n *corpusv1.Node, v *Snap) error {
	drv := fit.DriverOn(n, g.GetSpec().GetDriver())
	addr := ""
	if !drv.GetOwnNetwork() {
		a, err := ipamErr(ipam.NextAddress(n.GuestSubnet, v.AddressesOn(n.Id)))
		if err != nil {
			return fmt.Errorf("placing guest %s on node %s: %w", g.Name, n.Name, err)
		}
		addr = a.String()
	}
	var r uint32
	if a.allows(compat.GuestIDRanges) {
		// A replica of a release before id ranges would leave g on
		// the shared range: until every voter gives them, none does.
		var err error
		if r, err = nextIDRange(g, n, drv, v); err != nil {
			return err
		}
	}
	if err := a.placeVolume(g, n); err != nil {
		return err
	}
	g.NodeId, g.Address, g.IdRange, g.PendingReason = n.Id, addr, r, ""
	return nil
}

// nextIDRange returns the lowest id range free on node n for guest g
// (not placed there yet), whose driver there is drv; 0 when g takes
// none there.
func nextIDRange(g *corpusv1.Guest, n *corpusv1.Node, drv *corpusv1.DriverInfo, v *Snap) (uint32, error) {
	c := idrange.Capacity(drv, g.GetSpec())
	if c == 0 {
		return 0, nil
	}
	r, ok := idrange.Lowest(c, v.NodeIDRanges(n.Id))
	if !ok {
		return 0, fmt.Errorf("placing guest %s on node %s: its %d guest id ranges are all taken: %w", g.Name, n.Name, c, ErrExhausted)
	}
	return r, nil
}

// giveIDRanges gives the guests on node n that have no id range one,
// where their driver there now keeps ranges (the node's agent offers
// them since it was upgraded): they move to it at their next start.
// Guests in the order of their names, so every replica gives the same.
// Nothing before the cluster version allows id ranges (setClusterVersion
// gives them then).
func (a *applier) giveIDRanges(n *corpusv1.Node) {
	if !a.allows(compat.GuestIDRanges) {
		return
	}
	v := a.view()
	for _, g := range v.GuestsOnNode(n.Id) {
		if g.IdRange != 0 || g.DesiredState == DesiredDeleted || g.PreviousNodeId != "" {
			continue
		}
		r, err := nextIDRange(g, n, fit.DriverOn(n, g.GetSpec().GetDriver()), v)
		if err != nil || r == 0 {
			continue // none free: it keeps the shared one
		}
		g = proto.Clone(g).(*corpusv1.Guest)
		g.IdRange = r
		a.event(g, "id-range", fmt.Sprintf("given id range %d of node %s; the guest moves to it at its next start", r, n.Name))
		g.ModifyIndex = a.index
		a.put(statedb.TableGuests, g)
	}
}

// migrated ends a migration once the new copy is where it should be
// (running, or stopped when that is what is wanted): the old node then
// no longer has the guest in its desired state and removes its copy.
func (a *applier) migrated(g *corpusv1.Guest) {
	if g.PreviousNodeId == "" {
		return
	}
	st := g.GetObserved().GetState()
	if st != g.DesiredState || (st != ObservedRunning && st != ObservedStopped) {
		return
	}
	name := g.PreviousNodeId
	if n, err := a.node(g.PreviousNodeId); err == nil {
		name = n.Name
	}
	g.PreviousNodeId, g.PreviousAddress, g.PreviousIdRange = "", "", 0
	a.event(g, "migrated", "the new copy is "+st+"; the copy on node "+name+" is removed")
}

func (a *applier) setNodeMode(c *corpusv1.SetNodeMode) error {
	n, err := a.node(c.NodeId)
	if err != nil {
		return err
	}
	switch c.Mode {
	case "", ModeDev, ModeStaging, ModeProd, ModeDrain:
	default:
		return fmt.Errorf("node mode %q: %w", c.Mode, ErrInvalid)
	}
	switch c.Eligibility {
	case "":
	case corpusv1.Eligible:
		n.Ineligible = false
	case corpusv1.Ineligible:
		n.Ineligible = true
	default:
		return fmt.Errorf("node eligibility %q: %w", c.Eligibility, ErrInvalid)
	}
	if c.Mode != "" {
		n.Mode = c.Mode
	}
	n.ModifyIndex = a.index
	a.put(statedb.TableNodes, n)
	return nil
}

// nodeDown finishes, on a node that went down, the deletes it can no
// longer confirm: the records go now, and the node removes what is left
// of those guests when it returns (they are not in its desired state).
func (a *applier) nodeDown(nodeID string) {
	for _, g := range a.view().GuestsOnNode(nodeID) {
		if g.DesiredState == DesiredDeleted {
			a.deleteGuest(proto.Clone(g).(*corpusv1.Guest))
		}
	}
}

// nodeReady clears the reasons recorded for guests that stayed on a node
// while it was down: they run where they are again.
func (a *applier) nodeReady(nodeID string) {
	for _, g := range a.view().GuestsOnNode(nodeID) {
		if g.PendingReason != "" {
			g = proto.Clone(g).(*corpusv1.Guest)
			g.PendingReason = ""
			g.ModifyIndex = a.index
			a.put(statedb.TableGuests, g)
		}
	}
}
