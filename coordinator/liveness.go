package coordinator

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// liveness keeps, on the leader, the time each node's agent last reported
// and marks nodes down when they miss their deadline. Heartbeats are kept
// in memory, not written through Raft: only status changes are.
type liveness struct {
	timeout time.Duration
	mu      sync.Mutex
	last    map[string]time.Time
}

func newLiveness(timeout time.Duration) *liveness {
	return &liveness{timeout: timeout, last: map[string]time.Time{}}
}

func (l *liveness) seen(nodeID string) {
	l.mu.Lock()
	l.last[nodeID] = time.Now()
	l.mu.Unlock()
}

// reset gives every node a fresh deadline: a new leader has no heartbeat
// history, and must not mark the fleet down for it.
func (l *liveness) reset() {
	l.mu.Lock()
	clear(l.last)
	l.mu.Unlock()
}

func (l *liveness) run(ctx context.Context, store *state.Store, propose func(context.Context, *corpusv1.Command) (uint64, error), logger *slog.Logger) {
	tick := time.NewTicker(l.timeout / 5)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		for _, n := range store.Read().Nodes() {
			l.mu.Lock()
			last, ok := l.last[n.Id]
			if !ok {
				l.last[n.Id] = now // grace period starts now
			}
			l.mu.Unlock()
			if !ok || n.Status != state.NodeReady || now.Sub(last) < l.timeout {
				continue
			}
			logger.Warn("node missed its heartbeat deadline", "node", n.Name, "last_seen", last)
			_, err := propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetNodeStatus{SetNodeStatus: &corpusv1.SetNodeStatus{
				NodeId: n.Id, Status: state.NodeDown,
			}}})
			if err != nil && ctx.Err() == nil {
				logger.Warn("marking node down", "node", n.Name, "error", err)
			}
		}
	}
}
