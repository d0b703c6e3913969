package state

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state/statedb"
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
	if raw := a.get(statedb.TableCoordinators, "id", co.Id); raw != nil {
		old := raw.(*corpusv1.Coordinator)
		if old.RaftAddress == co.RaftAddress && old.ApiAddress == co.ApiAddress && old.DnsAddress == co.DnsAddress && old.GossipAddress == co.GossipAddress && old.Version == co.Version && old.ServerVersion == co.ServerVersion &&
			old.CaPin == co.CaPin && slices.Equal(old.TrustedCaPins, co.TrustedCaPins) {
			return nil
		}
		co.CreateIndex = old.CreateIndex
	}
	co.ModifyIndex = a.index
	a.put(statedb.TableCoordinators, co)
	return nil
}

func (a *applier) removeCoordinator(c *corpusv1.RemoveCoordinator) error {
	raw := a.get(statedb.TableCoordinators, "id", c.Id)
	if raw == nil {
		return nil
	}
	if err := a.txn.Delete(statedb.TableCoordinators, raw); err != nil {
		panic(fmt.Sprintf("state: deleting coordinator: %v", err))
	}
	return nil
}
