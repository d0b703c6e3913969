package coordinator

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"corpus/coordinator/state"
	"corpus/internal/gossip"
	corpusv1 "corpus/proto/corpus/v1"
)

// liveness decides, on the leader, when a node is down. Two signals feed
// it, both kept in memory (only status changes go through Raft):
//
//   - heartbeats: each agent report; a node silent for the timeout is
//     down (the fallback, and the only signal without gossip);
//   - gossip: every replica's gossip member hears when a node's member
//     is found dead (by this replica's probes or its peers'). That is an
//     immediate miss: the node is marked down at once, unless it reported
//     since (then its gossip is broken, not the node, and the deadline
//     decides), or another member of it is alive: each agent process is
//     a member of its own, and a restarted agent's predecessor is often
//     found dead only after its successor joined. The death is checked
//     first: a node whose agent still accepts a connection is not down
//     (its host is starved, its UDP late or lost: seen on a machine at
//     load 27 on two cores, where gossip found a node dead and the
//     cluster moved its guests away); its deadline decides then.
//
// A new leader has no heartbeat history: reset starts every node's
// deadline afresh (the grace period), and gossip deaths heard before it
// count only through the deadline, so a failover does not mark the
// fleet down. So does a checker that did not run for half the timeout
// (its process paused or starved): what it missed meanwhile it cannot
// tell from silence, and a leader resumed from a pause would otherwise
// mark every node down before it learns it was deposed.
type liveness struct {
	timeout time.Duration
	// checked is when the checker last looked (zero before it ran).
	checked time.Time

	mu   sync.Mutex
	last map[string]time.Time // last heartbeat (or grace start), by node id
	gone map[string]time.Time // when gossip found the node dead, by node id
	// members are the node's gossip members heard alive, by node id.
	members map[string]map[string]bool
	wake    chan struct{}
	// answers says whether the agent at addr accepts a TCP connection
	// within wait.
	answers func(ctx context.Context, addr string, wait time.Duration) bool
}

// confirmTimeout bounds the check of a node gossip found dead: a killed
// agent refuses at once, a host cut off leaves the connection
// unanswered this long; a quarter of the node timeout when that is
// shorter, so the check ends well before the checker's next look (which
// would take a longer gap for a stall).
const confirmTimeout = 2 * time.Second

// deadByGossip is the verdict on a node gossip found dead.
const deadByGossip = "found dead by gossip"

func newLiveness(timeout time.Duration) *liveness {
	return &liveness{timeout: timeout, last: map[string]time.Time{}, gone: map[string]time.Time{},
		members: map[string]map[string]bool{}, wake: make(chan struct{}, 1), answers: accepts}
}

// accepts dials addr; the kernel completes the handshake for a listening
// agent however busy its process is.
func accepts(ctx context.Context, addr string, wait time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func (l *liveness) seen(nodeID string) {
	l.mu.Lock()
	l.last[nodeID] = time.Now()
	l.mu.Unlock()
}

// gossip records what the gossip pool says of a member (gossip.Config's
// OnChange); the death of a node's last member alive wakes the checker.
func (l *liveness) gossip(member string, alive bool) {
	id, ok := gossip.NodeID(member)
	if !ok {
		return
	}
	l.mu.Lock()
	ms := l.members[id]
	if alive {
		if ms == nil {
			ms = map[string]bool{}
			l.members[id] = ms
		}
		ms[member] = true
		delete(l.gone, id)
	} else {
		delete(ms, member)
		if len(ms) == 0 {
			delete(l.members, id)
			l.gone[id] = time.Now()
		} else {
			alive = true // its successor is: nothing to check
		}
	}
	l.mu.Unlock()
	if !alive {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// reset gives every node a fresh deadline: a new leader has no heartbeat
// history, and must not mark the fleet down for it.
func (l *liveness) reset() {
	l.mu.Lock()
	clear(l.last)
	l.mu.Unlock()
}

// stalled says whether the checker, looking at now, did not look for
// half the timeout or more; it then resets every deadline.
func (l *liveness) stalled(now time.Time) (bool, time.Duration) {
	gap := now.Sub(l.checked)
	l.checked = now
	if gap < l.timeout/2 {
		return false, 0
	}
	l.reset()
	return true, gap
}

// verdict says why a ready node is down now, or "".
func (l *liveness) verdict(nodeID string, now time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	last, ok := l.last[nodeID]
	if !ok {
		l.last[nodeID] = now // grace period starts now
		return ""
	}
	if now.Sub(last) >= l.timeout {
		return "missed its heartbeat deadline"
	}
	if goneAt, ok := l.gone[nodeID]; ok && goneAt.After(last) {
		return deadByGossip
	}
	return ""
}

// down is a ready node the checker found down, and why.
type down struct {
	node *corpusv1.Node
	why  string
}

// downs are the ready nodes among nodes that are down at now. A node
// gossip found dead whose agent accepts a connection is not: that death
// is forgotten (logged), and its heartbeat deadline decides. The checks
// run at once, so a rack that went dark costs one confirmTimeout.
func (l *liveness) downs(ctx context.Context, nodes []*corpusv1.Node, now time.Time, logger *slog.Logger) []down {
	var out, checks []down
	for _, n := range nodes {
		why := l.verdict(n.Id, now)
		switch {
		case why == "" || n.Status != state.NodeReady:
		case why == deadByGossip && n.AgentAddress != "":
			checks = append(checks, down{n, why})
		default:
			out = append(out, down{n, why})
		}
	}
	wait := min(confirmTimeout, l.timeout/4)
	answered := make([]bool, len(checks))
	var wg sync.WaitGroup
	for i, d := range checks {
		wg.Go(func() { answered[i] = l.answers(ctx, d.node.AgentAddress, wait) })
	}
	wg.Wait()
	for i, d := range checks {
		if !answered[i] {
			out = append(out, d)
			continue
		}
		l.forgetDeath(d.node.Id, now)
		logger.Warn("gossip found the node dead, but its agent accepts connections: its heartbeat deadline decides", "node", d.node.Name, "agent", d.node.AgentAddress)
	}
	return out
}

// forgetDeath forgets the gossip death of a node heard by at: one heard
// later (while its agent was checked) waits for the next look.
func (l *liveness) forgetDeath(nodeID string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if goneAt, ok := l.gone[nodeID]; ok && !goneAt.After(at) {
		delete(l.gone, nodeID)
	}
}

func (l *liveness) run(ctx context.Context, store *state.Store, propose func(context.Context, *corpusv1.Command) (uint64, error), logger *slog.Logger) {
	tick := time.NewTicker(l.timeout / 5)
	defer tick.Stop()
	l.checked = time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-l.wake:
		}
		now := time.Now()
		if stalled, gap := l.stalled(now); stalled {
			logger.Warn("heartbeats went unchecked (this process paused or starved): every node's deadline starts afresh", "for", gap.Round(time.Millisecond))
			continue
		}
		for _, d := range l.downs(ctx, store.Read().Nodes(), now, logger) {
			n, why := d.node, d.why
			_, err := propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetNodeStatus{SetNodeStatus: &corpusv1.SetNodeStatus{
				NodeId: n.Id, Status: state.NodeDown,
			}}})
			switch {
			case err == nil:
				logger.Warn("node marked down", "node", n.Name, "why", why)
			case ctx.Err() == nil:
				logger.Warn("marking node down", "node", n.Name, "why", why, "error", err)
			}
		}
	}
}
