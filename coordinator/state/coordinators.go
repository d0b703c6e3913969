package state

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	corpusv1 "corpus/proto/corpus/v1"
)

// The replicas of the control plane: where each answers, so followers can
// pass writes to the leader and clients can be pointed at it.

func (a *applier) upsertCoordinator(c *corpusv1.UpsertCoordinator) error {
	co := c.Coordinator
	if co == nil || co.Id == "" || co.RaftAddress == "" {
		return fmt.Errorf("coordinator without id or raft address: %w", ErrInvalid)
	}
	co = proto.Clone(co).(*corpusv1.Coordinator)
	co.CreateIndex = a.index
	if raw := a.get(tableCoordinators, "id", co.Id); raw != nil {
		old := raw.(*corpusv1.Coordinator)
		if old.RaftAddress == co.RaftAddress && old.ApiAddress == co.ApiAddress && old.DnsAddress == co.DnsAddress && old.GossipAddress == co.GossipAddress && old.Version == co.Version {
			return nil
		}
		co.CreateIndex = old.CreateIndex
	}
	co.ModifyIndex = a.index
	a.put(tableCoordinators, co)
	return nil
}

func (a *applier) removeCoordinator(c *corpusv1.RemoveCoordinator) error {
	raw := a.get(tableCoordinators, "id", c.Id)
	if raw == nil {
		return nil
	}
	if err := a.txn.Delete(tableCoordinators, raw); err != nil {
		panic(fmt.Sprintf("state: deleting coordinator: %v", err))
	}
	return nil
}

// Coordinator returns the replica with that id, or nil.
func (v *Snap) Coordinator(id string) *corpusv1.Coordinator {
	return first[*corpusv1.Coordinator](v, tableCoordinators, "id", id)
}

// Coordinators returns every known replica sorted by id.
func (v *Snap) Coordinators() []*corpusv1.Coordinator {
	out := all[*corpusv1.Coordinator](v, tableCoordinators, "id")
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}
