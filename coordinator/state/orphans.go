package state

import (
	"slices"

	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// reportOrphans replaces a node's orphans (Node.orphans): the guests it
// runs that the cluster does not know, as its agent reported them.
func (a *applier) reportOrphans(c *corpusv1.ReportOrphans) error {
	n, err := a.node(c.NodeId)
	if err != nil {
		return err
	}
	n.Orphans = slices.Clone(c.Orphans)
	n.ModifyIndex = a.index
	a.put(statedb.TableNodes, n)
	return nil
}

// SameOrphans reports whether two lists of orphans name the same guests
// in the same order (agents report them sorted by name).
func SameOrphans(a, b []*corpusv1.OrphanGuest) bool {
	return slices.EqualFunc(a, b, func(x, y *corpusv1.OrphanGuest) bool {
		return x.GuestId == y.GuestId && x.Name == y.Name
	})
}
