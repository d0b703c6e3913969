package agent

import (
	"cmp"
	"slices"

	corpusv1 "corpus/proto/corpus/v1"
)

// Orphans: a cluster restored from a snapshot (corpus coordinator
// --restore) wants what the snapshot held. Guests deleted after the
// snapshot are desired again and come back. Guests created after it are
// unknown to the restored state: the agent keeps those it runs as they
// are (running, but no longer managed) instead of removing them as
// undesired, logs each, and remembers them across restarts (the
// operator creates them again through the API or removes them by hand;
// docs/operator/backups.md); each report names them (Node.orphans:
// corpus guest list --orphans), until they are gone from the node. The
// first desired state carrying a new restore
// id is compared with the one before it: a guest desired then, created
// after the snapshot's index and not desired now is such a guest.

// loadOrphans reads the orphans kept before a restart.
func (a *Agent) loadOrphans() {
	orphans, err := a.cache.Orphans()
	if err != nil {
		a.logger.Warn("reading the guests unknown to the cluster", "error", err)
	}
	a.mu.Lock()
	a.orphans = orphans
	a.mu.Unlock()
}

// noteRestore records as orphans, when msg is the first desired state
// after a restore, the guests the snapshot predates; called before msg
// is cached or applied.
func (a *Agent) noteRestore(msg *corpusv1.WatchResponse) {
	r := msg.GetRestore()
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.GetId() == "" || r.GetId() == a.restore || !a.known {
		return
	}
	now := make(map[string]bool, len(msg.Guests))
	for _, g := range msg.Guests {
		now[g.Id] = true
	}
	found := false
	for id, g := range a.desired {
		if !now[id] && g.CreateIndex > r.SnapshotIndex {
			if a.orphans == nil {
				a.orphans = map[string]string{}
			}
			a.orphans[id] = g.Name
			found = true
			a.logger.Warn("guest unknown to the cluster (restored from a snapshot older than it): kept as it is, no longer managed; create it again or remove it by hand",
				"guest", g.Name, "guest_id", id, "created_at_index", g.CreateIndex, "snapshot_index", r.SnapshotIndex)
		}
	}
	if found {
		if err := a.cache.SetOrphans(a.orphans); err != nil {
			a.logger.Warn("caching the guests unknown to the cluster", "error", err)
		}
		a.poke(a.report)
	}
}

// orphanList is the orphans as a report names them, sorted by name.
func (a *Agent) orphanList() []*corpusv1.OrphanGuest {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*corpusv1.OrphanGuest, 0, len(a.orphans))
	for id, name := range a.orphans {
		out = append(out, &corpusv1.OrphanGuest{GuestId: id, Name: name})
	}
	slices.SortFunc(out, func(x, y *corpusv1.OrphanGuest) int {
		return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.GuestId, y.GuestId))
	})
	return out
}

// pruneOrphans forgets the orphans no driver has any more (removed by
// hand), given the ids of every guest the drivers listed.
func (a *Agent) pruneOrphans(present map[string]bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	gone := false
	for id, name := range a.orphans {
		if !present[id] {
			delete(a.orphans, id)
			gone = true
			a.logger.Info("guest unknown to the cluster is gone from the node", "guest", name, "guest_id", id)
		}
	}
	if gone {
		if err := a.cache.SetOrphans(a.orphans); err != nil {
			a.logger.Warn("caching the guests unknown to the cluster", "error", err)
		}
		a.poke(a.report)
	}
}
