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

// Loop places guests until ctx ends. Each pass plans on a snapshot of the
// state and commits its plan (maxPlan entries at most) as one
// PlaceGuests entry, then blocks until the nodes or guests change (a
// watch, not a poll; its own commit is such a change). Errors are
// logged and retried with backoff; a bad guest never stops the loop.
// m, which may be nil, records the passes.
func Loop(ctx context.Context, store *state.Store, propose Proposer, logger *slog.Logger, m *Metrics) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		view := store.Read()
		err := pass(ctx, store, view, propose, logger, m)
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

// pass commits the plan for view and logs what it did.
func pass(ctx context.Context, store *state.Store, view *state.Snap, propose Proposer, logger *slog.Logger, m *Metrics) error {
	start := time.Now()
	plan := planUpTo(view, maxPlan)
	if len(plan) == 0 {
		return nil
	}
	_, err := propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_PlaceGuests{PlaceGuests: &corpusv1.PlaceGuests{Placements: plan}}})
	switch {
	case errors.Is(err, state.ErrStale):
		// Nothing in the plan holds any more: what changed under it
		// wakes the next pass.
		logger.Debug("scheduling plan is stale", "placements", len(plan), "error", err)
		return nil
	case err != nil:
		return err
	}
	after := store.Read()
	placed, pending := 0, 0
	defer func() { m.observe(start, placed, pending) }()
	for _, p := range plan {
		g := after.Guest(p.GuestId)
		switch {
		case g == nil:
		case p.NodeId != "" && g.NodeId == p.NodeId:
			placed++
			logger.Info("placed guest", "guest", g.Name, "node", after.Node(p.NodeId).GetName())
		case p.NodeId == "" && g.PendingReason == p.Reason:
			pending++
			logger.Info("guest pending", "guest", g.Name, "reason", p.Reason)
		default:
			logger.Debug("placement no longer held", "guest", g.Name)
		}
	}
	return nil
}
