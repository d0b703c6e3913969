// Package groupcommit gathers the writes a leader proposes at the same
// time into one Raft entry, as etcd batches proposals. A write proposed
// while fewer than MaxInFlight entries are being committed goes out at
// once, alone, as a plain entry: no timer, no added latency. Writes
// proposed while MaxInFlight entries are being committed wait for the
// first of them and then leave together, as one batch entry
// (state.EncodeBatch) of at most MaxCommands commands and MaxBytes
// bytes. Entries in flight overlap: the leader writes one to its log
// while the followers write the one before to theirs. Each write gets
// its own answer: the state machine applies a batch's commands in
// order, each with its own business error, and a write is answered once
// its entry is applied on this replica.
//
//	propose ──▶ queue ──▶ run: room in flight? ──▶ take all queued ──▶ raft.Apply ──▶ flights
//	                      (the queue fills meanwhile)  (up to the bounds)   one entry      │
//	answer each ◀── answers: wait applied, in Raft's order ◀────────────────────────────────┘
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

// DefaultMaxInFlight entries may be in Raft at once: while the followers
// write one to their logs, the leader writes the next to its own, and
// the one after gathers the writes that arrive meanwhile. One alone
// would leave the leader's disk idle during every round trip and the
// followers' during every leader's write.
const DefaultMaxInFlight = 4

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
	// MaxInFlight bounds the entries handed to Raft and not yet applied
	// (0: DefaultMaxInFlight).
	MaxInFlight int
	// Metrics receives the batch sizes (nil: not exported).
	Metrics prometheus.Registerer
}

// Committer proposes commands through Raft, gathering concurrent ones.
type Committer struct {
	cfg   Config
	clock clock.Clock
	queue chan *proposal
	// slots holds a token for each entry in flight: handed to Raft and
	// not answered yet; flights are those entries, in Raft's order.
	slots   chan struct{}
	flights chan *flight
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
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	c := &Committer{
		cfg:     cfg,
		clock:   clock.Or(cfg.Clock),
		queue:   make(chan *proposal, 4*cfg.MaxCommands),
		slots:   make(chan struct{}, cfg.MaxInFlight),
		flights: make(chan *flight, cfg.MaxInFlight),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
		sizes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: "raft", Name: "entry_commands",
			Help:    "Commands carried by each Raft entry the leader proposed (more than one: a batch entry of writes that arrived while the entries in flight filled every slot).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}),
	}
	if cfg.Metrics != nil {
		cfg.Metrics.MustRegister(c.sizes)
	}
	go c.run()
	go c.answers()
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

// Hold waits until every entry the committer handed to Raft is applied
// on this replica and keeps it from handing over more until release is
// called: while held, the log grows by no entry of the committer's
// (writes proposed meanwhile queue and leave once released). It fails
// when ctx ends or the committer stops first, holding nothing.
func (c *Committer) Hold(ctx context.Context) (release func(), err error) {
	held := 0
	free := func() {
		for ; held > 0; held-- {
			<-c.slots
		}
	}
	// Each slot is an entry in flight: holding them all leaves none.
	for held < cap(c.slots) {
		select {
		case c.slots <- struct{}{}:
			held++
		case <-ctx.Done():
			free()
			return nil, fmt.Errorf("holding the writes: %w", ctx.Err())
		case <-c.stopped:
			free()
			return nil, raft.ErrRaftShutdown
		}
	}
	return free, nil
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

// run gathers the queued writes into entries and hands them to Raft,
// up to MaxInFlight entries not yet applied; answers answers them.
func (c *Committer) run() {
	defer close(c.flights)
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
		// Wait for room in flight; writes queue meanwhile and leave
		// together in the next entry.
		select {
		case c.slots <- struct{}{}:
		case <-c.stop:
			return
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
		if fl := c.propose(batch); fl != nil {
			c.flights <- fl
		} else {
			<-c.slots
		}
	}
}

// answers answers the entries in flight in the order Raft took them,
// which is the order it applies them, each once applied.
func (c *Committer) answers() {
	defer close(c.stopped)
	for fl := range c.flights {
		fl.answer()
		<-c.slots
	}
}

// flight is an entry (or, in a group without batch entries, the entries
// of a gathering) handed to Raft and not answered yet.
type flight struct {
	props   []*proposal
	futures []raft.ApplyFuture
	// batch: futures holds one batch entry whose answer is one result a
	// proposal; otherwise one plain entry a proposal.
	batch bool
}

// propose hands batch to Raft and returns what to answer once it is
// applied; nil when nothing was handed over.
func (c *Committer) propose(batch []*proposal) *flight {
	// A write whose caller gave up before it was taken is not taken.
	live := batch[:0]
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.answer <- answer{err: fmt.Errorf("proposing command: %w", err)}
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return nil
	}
	if len(live) == 1 || !c.batches() {
		// One entry a write: a lone write, or a group that cannot apply
		// batches; Raft still writes and sends the entries together.
		fl := &flight{props: live}
		for _, p := range live {
			c.sizes.Observe(1)
			fl.futures = append(fl.futures, c.cfg.Raft.Apply(p.data, applyTimeout))
		}
		return fl
	}
	cmds := make([]*corpusv1.Command, len(live))
	for i, p := range live {
		cmds[i] = p.cmd
	}
	data, err := state.EncodeBatch(cmds, c.clock.Now())
	if err != nil {
		for _, p := range live {
			p.answer <- answer{err: fmt.Errorf("encoding a batch entry: %w", err)}
		}
		return nil
	}
	c.sizes.Observe(float64(len(live)))
	return &flight{props: live, futures: []raft.ApplyFuture{c.cfg.Raft.Apply(data, applyTimeout)}, batch: true}
}

// answer waits until fl is applied and answers each of its writes.
func (fl *flight) answer() {
	if !fl.batch {
		for i, p := range fl.props {
			p.answer <- single(fl.futures[i])
		}
		return
	}
	f := fl.futures[0]
	if err := f.Error(); err != nil {
		for _, p := range fl.props {
			p.answer <- answer{err: err}
		}
		return
	}
	results, ok := f.Response().([]*state.Result)
	if !ok || len(results) != len(fl.props) {
		// The state machine answers a batch entry with one result a
		// command; anything else is a bug, not a write to retry.
		err := fmt.Errorf("state machine answered a batch entry of %d commands with %T", len(fl.props), f.Response())
		for _, p := range fl.props {
			p.answer <- answer{err: err}
		}
		return
	}
	for i, p := range fl.props {
		p.answer <- answer{res: results[i]}
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
