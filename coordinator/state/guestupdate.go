package state

import (
	"fmt"
	"maps"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/fit"
	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// updateGuest replaces a guest's spec with c.Spec. Only what a driver can
// change on a running guest may differ (image, memory, cpu, env, ports);
// a placed guest's node driver must converge in place (DriverInfo.Converge),
// and a bigger guest must still fit its node. The same spec again changes
// nothing.
func (a *applier) updateGuest(c *corpusv1.UpdateGuest) error {
	g, err := a.guest(func() any { return a.get(statedb.TableGuests, "name", c.Name) }, c.Name)
	if err != nil {
		return err
	}
	if c.Spec == nil {
		return fmt.Errorf("updating guest %s without a spec: %w", g.Name, ErrInvalid)
	}
	if g.DesiredState == DesiredDeleted {
		return fmt.Errorf("guest %s is being deleted: %w", g.Name, ErrBadTransition)
	}
	old, spec := g.GetSpec(), c.Spec
	if proto.Equal(old, spec) {
		return nil
	}
	if why := FixedChanged(old, spec); why != "" {
		return fmt.Errorf("guest %s: %s cannot change; only image, memory, cpu, env and ports can: %w", g.Name, why, ErrInvalid)
	}
	if g.NodeId != "" {
		if err := a.updatableOn(g, spec); err != nil {
			return err
		}
	}
	g.Spec = proto.Clone(spec).(*corpusv1.GuestSpec)
	if len(c.Admission) > 0 {
		g.Admission = c.Admission
	}
	a.event(g, "updated", "spec updated: image "+spec.GetImage())
	g.ModifyIndex = a.index
	a.put(statedb.TableGuests, g)
	return nil
}

// FixedChanged names the first part of a guest's spec that differs
// between old and spec and that no update may change (driver, disk,
// volume, constraints), or "".
func FixedChanged(old, spec *corpusv1.GuestSpec) string {
	switch {
	case old.GetDriver() != spec.GetDriver():
		return "the driver"
	case old.GetResources().GetDiskBytes() != spec.GetResources().GetDiskBytes():
		return "the disk size"
	case !proto.Equal(old.GetVolume(), spec.GetVolume()):
		return "the volume (resize it with corpus volume resize)"
	case !maps.Equal(old.GetConstraints(), spec.GetConstraints()):
		return "the constraints"
	}
	return ""
}

// updatableOn refuses a spec the node of placed guest g cannot apply in
// place: a driver that does not converge, ports on the node's own network
// (they would need a new port check and NAT), a guest that is moving, or
// more memory or cpu than the node has left.
func (a *applier) updatableOn(g *corpusv1.Guest, spec *corpusv1.GuestSpec) error {
	n, err := a.node(g.NodeId)
	if err != nil {
		return err
	}
	drv := fit.DriverOn(n, spec.GetDriver())
	if drv == nil || !drv.Converge {
		return fmt.Errorf("guest %s runs on node %s, whose driver %s cannot change a guest in place; delete it and create it again with the new spec: %w",
			g.Name, n.Name, spec.GetDriver(), ErrBadTransition)
	}
	if g.PreviousNodeId != "" {
		return fmt.Errorf("guest %s is moving between nodes; update it once it runs on one: %w", g.Name, ErrBadTransition)
	}
	if !drv.OwnNetwork && !samePorts(g.GetSpec().GetPorts(), spec.GetPorts()) {
		return fmt.Errorf("guest %s publishes ports on node %s's network; they change only by creating the guest again: %w", g.Name, n.Name, ErrBadTransition)
	}
	// Its id range and ports it keeps: what it asks of the node is room
	// for what its resources grow by, beside what the node holds.
	oldR, newR := g.GetSpec().GetResources(), spec.GetResources()
	grow := &corpusv1.Resources{
		MemoryBytes: max(newR.GetMemoryBytes()-oldR.GetMemoryBytes(), 0),
		CpuMillis:   max(newR.GetCpuMillis()-oldR.GetCpuMillis(), 0),
		DiskBytes:   max(newR.GetDiskBytes()-oldR.GetDiskBytes(), 0),
	}
	if why := fit.Short(n.GetCapacity(), a.view().NodeAllocated(n.Id), grow); why != "" {
		return fmt.Errorf("guest %s: node %s is %s for the new spec: %w", g.Name, n.Name, why, ErrNoRoom)
	}
	return nil
}

func samePorts(a, b []*corpusv1.Port) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
