// Package groupcommit gathers the writes a leader proposes at the same
// time into one Raft entry, as etcd batches proposals. A write proposed
// while no entry is being committed goes out at once, alone, as a plain
// entry: no timer, no added latency. Writes proposed while an entry is
// being committed wait for it and then leave together, as one batch
// entry (state.EncodeBatch) of at most MaxCommands commands and
// MaxBytes bytes. Each write gets its own answer: the state machine
// applies a batch's commands in order, each with its own business error,
// and a write is answered once its entry is applied on this replica.
//
//	propose ──▶ queue ──▶ loop: take all queued ──▶ raft.Apply ──▶ wait applied ──▶ answer each
//	                         (up to the bounds)       one entry       (the queue fills meanwhile)
//
// A group whose cluster version does not allow batch entries
// (compat.BatchedEntries) gets one entry a write, as before.
package groupcommit

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"corpus/coordinator/compat"
	"corpus/coordinator/state"
	"corpus/internal/clock"
	"corpus/internal/metrics"
	corpusv1 "corpus/proto/corpus/v1"
)

// Default bounds of a batch entry: etcd's raft sends at most 1 MiB in one
// message by default, and hashicorp/raft appends up to 64 entries at once.
const (
	DefaultMaxCommands = 64
	DefaultMaxBytes    = 1 << 20
)

// applyTimeout bounds how long an entry may wait to be taken by Raft
// (not how long it takes to commit: once taken, it commits or fails as
// Raft decides).
const applyTimeout = 10 * time.Second

// Raft is what the committer needs of *raft.Raft.
type Raft interface {
	Apply(cmd []byte, timeout time.Duration) raft.ApplyFuture
}

// Config is what New needs.
type Config struct {
	Raft Raft
	// Store is the replica's state: its cluster version says whether the
	// group applies batch entries (compat.BatchedEntries).
	Store *state.Store
	// Clock stamps batch entries (nil: clock.System).
	Clock clock.Clock
	// MaxCommands and MaxBytes bound one batch entry (0: the defaults).
	MaxCommands, MaxBytes int
	// Metrics receives the batch sizes (nil: not exported).
	Metrics prometheus.Registerer
}

// Committer proposes commands through Raft, gathering concurrent ones.
type Committer struct {
	cfg     Config
	clock   clock.Clock
	queue   chan *proposal
	stop    chan struct{}
	stopped chan struct{}
	sizes   prometheus.Histogram
}

// proposal is one write waiting to be committed.
type proposal struct {
	ctx    context.Context
	cmd    *corpusv1.Command
	data   []byte
	answer chan answer
}

type answer struct {
	res *state.Result
	err error
}

// New starts a committer; Close stops it.
func New(cfg Config) *Committer {
	if cfg.MaxCommands <= 0 {
		cfg.MaxCommands = DefaultMaxCommands
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	c := &Committer{
		cfg:     cfg,
		clock:   clock.Or(cfg.Clock),
		queue:   make(chan *proposal, 4*cfg.MaxCommands),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
		sizes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: "raft", Name: "entry_commands",
			Help:    "Commands carried by each Raft entry the leader proposed (more than one: a batch entry of writes that arrived while the entry before was being committed).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}),
	}
	if cfg.Metrics != nil {
		cfg.Metrics.MustRegister(c.sizes)
	}
	go c.run()
	return c
}

// Propose commits cmd, which state.Encode made into data, and waits until
// it is applied on this replica. The error is a replication failure (one
// of raft's: ErrNotLeader, ErrLeadershipLost, ErrEnqueueTimeout,
// ErrRaftShutdown; or ctx's, when it ended before the write was taken);
// the command's business error is in the Result. ctx bounds how long the
// write waits to be taken; once taken, it is answered whatever ctx does.
func (c *Committer) Propose(ctx context.Context, cmd *corpusv1.Command, data []byte) (*state.Result, error) {
	p := &proposal{ctx: ctx, cmd: cmd, data: data, answer: make(chan answer, 1)}
	select {
	case c.queue <- p:
	case <-ctx.Done():
		return nil, fmt.Errorf("proposing command: %w", ctx.Err())
	case <-c.stopped:
		return nil, raft.ErrRaftShutdown
	}
	select {
	case a := <-p.answer:
		return a.res, a.err
	case <-c.stopped:
		// The loop answers all it took before it stops.
		select {
		case a := <-p.answer:
			return a.res, a.err
		default:
			return nil, raft.ErrRaftShutdown
		}
	}
}

// Close stops the committer: writes it has taken are answered, later
// ones fail with raft.ErrRaftShutdown.
func (c *Committer) Close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.stopped
}

func (c *Committer) run() {
	defer close(c.stopped)
	var next *proposal // the one that did not fit in the last batch
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		first := next
		next = nil
		if first == nil {
			select {
			case first = <-c.queue:
			case <-c.stop:
				return
			}
		}
		batch, size := []*proposal{first}, len(first.data)
	gather:
		for len(batch) < c.cfg.MaxCommands {
			select {
			case p := <-c.queue:
				if size+len(p.data) > c.cfg.MaxBytes {
					next = p
					break gather
				}
				batch, size = append(batch, p), size+len(p.data)
			default:
				break gather
			}
		}
		c.commit(batch)
	}
}

// commit proposes batch and answers each of its writes once applied.
func (c *Committer) commit(batch []*proposal) {
	// A write whose caller gave up before it was taken is not taken.
	live := batch[:0]
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.answer <- answer{err: fmt.Errorf("proposing command: %w", err)}
			continue
		}
		live = append(live, p)
	}
	switch {
	case len(live) == 0:
	case len(live) == 1:
		c.sizes.Observe(1)
		f := c.cfg.Raft.Apply(live[0].data, applyTimeout)
		live[0].answer <- single(f)
	case !c.batches():
		// One entry a write, as a group that cannot apply batches needs;
		// Raft still writes and sends the entries together.
		futures := make([]raft.ApplyFuture, len(live))
		for i, p := range live {
			c.sizes.Observe(1)
			futures[i] = c.cfg.Raft.Apply(p.data, applyTimeout)
		}
		for i, p := range live {
			p.answer <- single(futures[i])
		}
	default:
		cmds := make([]*corpusv1.Command, len(live))
		for i, p := range live {
			cmds[i] = p.cmd
		}
		data, err := state.EncodeBatch(cmds, c.clock.Now())
		if err != nil {
			for _, p := range live {
				p.answer <- answer{err: fmt.Errorf("encoding a batch entry: %w", err)}
			}
			return
		}
		c.sizes.Observe(float64(len(live)))
		f := c.cfg.Raft.Apply(data, applyTimeout)
		if err := f.Error(); err != nil {
			for _, p := range live {
				p.answer <- answer{err: err}
			}
			return
		}
		results, ok := f.Response().([]*state.Result)
		if !ok || len(results) != len(live) {
			// The state machine answers a batch entry with one result a
			// command; anything else is a bug, not a write to retry.
			err := fmt.Errorf("state machine answered a batch entry of %d commands with %T", len(live), f.Response())
			for _, p := range live {
				p.answer <- answer{err: err}
			}
			return
		}
		for i, p := range live {
			p.answer <- answer{res: results[i]}
		}
	}
}

// batches reports whether the group's cluster version allows batch
// entries now. It only rises, so a batch allowed when it is proposed is
// allowed when it applies.
func (c *Committer) batches() bool {
	return compat.Allows(c.cfg.Store.Read().ClusterVersion(), compat.BatchedEntries)
}

// single is the answer of a plain entry's future, once applied.
func single(f raft.ApplyFuture) answer {
	if err := f.Error(); err != nil {
		return answer{err: err}
	}
	if res, ok := f.Response().(*state.Result); ok {
		return answer{res: res}
	}
	return answer{res: &state.Result{Index: f.Index()}}
}
