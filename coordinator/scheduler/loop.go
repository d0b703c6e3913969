package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// Proposer commits a command through Raft.
type Proposer func(ctx context.Context, cmd *corpusv1.Command) (uint64, error)

// Loop places pending guests until ctx ends. It reads the state, commits a
// decision for every unplaced guest whose decision changed, then blocks
// until the nodes or guests change (a watch, not a poll). Errors are
// logged and retried with backoff; a bad guest never stops the loop.
func Loop(ctx context.Context, store *state.Store, propose Proposer, logger *slog.Logger) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		view := store.Read()
		err := pass(ctx, view, propose, logger)
		if err != nil && ctx.Err() == nil {
			logger.Warn("scheduling pass failed", "error", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if err := view.Wait(ctx); err != nil {
			return
		}
	}
}

// pass places every unplaced guest visible in view.
func pass(ctx context.Context, view *state.Snap, propose Proposer, logger *slog.Logger) error {
	nodes := view.Nodes()
	cands := make([]Candidate, len(nodes))
	byID := map[string]*Candidate{}
	for i, n := range nodes {
		cands[i] = Candidate{Node: n, Allocated: Allocated(view.GuestsOnNode(n.Id)), UsedPorts: view.UsedPorts(n)}
		byID[n.Id] = &cands[i]
	}
	var errs []error
	for _, g := range view.Guests() {
		if g.NodeId != "" || g.DesiredState == state.DesiredDeleted {
			continue
		}
		d := Decision{Reason: "its volume is on a node that is no longer enrolled"}
		if cs := volumeNode(view, g, cands); cs != nil {
			d = Place(g, cs)
		}
		if d.NodeID == "" && d.Reason == g.PendingReason {
			continue
		}
		_, err := propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_PlaceGuest{PlaceGuest: &corpusv1.PlaceGuest{
			GuestId: g.Id, NodeId: d.NodeID, Reason: d.Reason, ModifyIndex: g.ModifyIndex,
		}}})
		switch {
		case errors.Is(err, state.ErrStale), errors.Is(err, state.ErrNotFound):
			continue // changed under us; the next pass sees the new version
		case err != nil:
			errs = append(errs, err)
			continue
		}
		if d.NodeID != "" {
			c := byID[d.NodeID]
			logger.Info("placed guest", "guest", g.Name, "node", c.Node.Name)
			c.Allocated = Allocated([]*corpusv1.Guest{{Spec: &corpusv1.GuestSpec{Resources: c.Allocated}}, g})
			for _, p := range g.GetSpec().GetPorts() {
				c.UsedPorts[p.HostPort] = "guest " + g.Name + " (nat)"
			}
		} else {
			logger.Info("guest pending", "guest", g.Name, "reason", d.Reason)
		}
	}
	return errors.Join(errs...)
}

// volumeNode narrows the candidates of a guest whose volume already lives
// on a node to that node: its data is there. It returns nil when that node
// is gone.
func volumeNode(view *state.Snap, g *corpusv1.Guest, cands []Candidate) []Candidate {
	v := view.VolumeOfGuest(g.Id)
	if v == nil || v.NodeId == "" {
		return cands
	}
	for _, c := range cands {
		if c.Node.Id == v.NodeId {
			return []Candidate{c}
		}
	}
	return nil
}
