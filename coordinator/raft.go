package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/prometheus/client_golang/prometheus"

	"corpus/coordinator/api"
	"corpus/coordinator/compat"
	"corpus/coordinator/groupcommit"
	"corpus/coordinator/state"
	"corpus/internal/clock"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
)

// replica is this coordinator's member of the Raft group.
type replica struct {
	raft      *raft.Raft
	transport *raft.NetworkTransport
	logs      *raftboltdb.BoltStore
	snaps     raft.SnapshotStore
	fsm       *state.FSM
	store     *state.Store
	leaderCh  chan bool
	logger    *slog.Logger
	apply     prometheus.Histogram
	// commit gathers concurrent proposals into batch entries.
	commit *groupcommit.Committer
	// clock stamps the entries this replica proposes as leader.
	clock clock.Clock
	// members is held while the group's membership changes (Raft
	// configuration entries), and while the log must stay still (quiet).
	members sync.Mutex
}

// raftConfig is what openReplica needs.
type raftConfig struct {
	ID        string
	Dir       string
	BindAddr  string
	Bootstrap bool
	// Restore, when set, is installed into empty Raft storage.
	Restore *restoring
	// SnapshotThreshold is the number of log entries between snapshots;
	// TrailingLogs the entries kept after one.
	SnapshotThreshold uint64
	TrailingLogs      uint64
	// Multiplier scales Raft's timeouts (0 or 1: as below).
	Multiplier int
	// Clock stamps entries (nil: clock.System).
	Clock clock.Clock
	// Certs secure the transport (mutual TLS between replicas).
	Certs  *certs
	Logger *slog.Logger
	// Metrics receives the replica's Raft metrics.
	Metrics prometheus.Registerer
}

func openReplica(cfg raftConfig, store *state.Store) (*replica, error) {
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating raft folder: %w", err)
	}
	logs, err := raftboltdb.NewBoltStore(filepath.Join(cfg.Dir, "raft.db"))
	if err != nil {
		return nil, fmt.Errorf("opening raft log: %w", err)
	}
	if err := compat.CheckLog(logs); err != nil {
		logs.Close()
		return nil, err
	}
	hlog := raftLogger(cfg.Logger)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, hlog)
	if err != nil {
		logs.Close()
		return nil, fmt.Errorf("opening raft snapshots: %w", err)
	}
	addr, err := net.ResolveTCPAddr("tcp", cfg.BindAddr)
	if err != nil {
		logs.Close()
		return nil, fmt.Errorf("raft address %s: %w", cfg.BindAddr, err)
	}
	// With port 0 the listener picks the port; advertising addr would
	// tell the group (and API clients asking for the leader) ":0".
	var advertise net.Addr = addr
	if addr.Port == 0 {
		advertise = nil
	}
	layer, err := newRaftLayer(cfg.BindAddr, advertise, cfg.Certs)
	if err != nil {
		logs.Close()
		return nil, fmt.Errorf("raft transport on %s: %w", cfg.BindAddr, err)
	}
	transport := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  layer,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  hlog,
		// No pipelined replication. In hashicorp/raft 1.7 a follower that
		// answers one pipelined AppendEntries with Success=false ends the
		// goroutine reading the answers while the sender may already be
		// blocked handing over the next; nothing then closes the pipeline,
		// that follower gets no more entries, and Shutdown waits for the
		// sender for ever. Under load 3-replica test groups failed to stop
		// that way (a goroutine dump showed pipelineSend parked on the
		// pipeline). Its own documentation finds pipelining worth little
		// outside high-latency links, and test/bench/raft measures the
		// difference here.
		MaxRPCsInFlight: 1,
	})
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = hlog
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
		rc.SnapshotInterval = 5 * time.Second
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	leaderCh := make(chan bool, 8)
	rc.NotifyCh = leaderCh
	// One replica elects itself quickly, and a LAN group fails over in
	// about a second. A busy or slow host scales these up, as Consul's
	// and Nomad's raft_multiplier do: a leader whose CPU is saturated
	// misses its 250 ms lease and steps down, again and again.
	mult := time.Duration(max(cfg.Multiplier, 1))
	rc.HeartbeatTimeout = mult * 500 * time.Millisecond
	rc.ElectionTimeout = mult * 500 * time.Millisecond
	rc.LeaderLeaseTimeout = mult * 250 * time.Millisecond
	// A follower learns that an entry committed from the leader's next
	// AppendEntries; when no write follows, that is the one CommitTimeout
	// sends (50 ms by default, up to twice that with its jitter). A write
	// taken on a follower returns once the follower applied it, so it
	// waited that long: 11 writes/s from one client through a follower
	// against 95 through the leader (test/bench/raft). Idle
	// AppendEntries carry no entries and cost no fsync.
	rc.CommitTimeout = 5 * time.Millisecond

	fsm := state.NewFSM(store, cfg.Logger.With("component", "fsm"))
	existing, err := raft.HasExistingState(logs, logs, snaps)
	if err != nil {
		transport.Close()
		logs.Close()
		return nil, fmt.Errorf("reading raft state: %w", err)
	}
	if !existing && cfg.Restore != nil {
		if err := cfg.Restore.install(rc.LocalID, snaps, logs, transport); err != nil {
			transport.Close()
			logs.Close()
			return nil, err
		}
		existing = true
	}
	r, err := raft.NewRaft(rc, fsm, logs, logs, snaps, transport)
	if err != nil {
		transport.Close()
		logs.Close()
		if refused := fsm.Refused(); refused != nil {
			err = refused
		}
		return nil, fmt.Errorf("starting raft: %w", err)
	}
	if !existing && cfg.Bootstrap {
		f := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			ID: rc.LocalID, Address: transport.LocalAddr(),
		}}})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			r.Shutdown()
			transport.Close()
			logs.Close()
			return nil, fmt.Errorf("bootstrapping raft: %w", err)
		}
	}
	rep := &replica{raft: r, transport: transport, logs: logs, snaps: snaps, fsm: fsm, store: store, leaderCh: leaderCh, logger: cfg.Logger, apply: newApplyHistogram(), clock: clock.Or(cfg.Clock)}
	rep.commit = groupcommit.New(groupcommit.Config{
		Raft:    r,
		Store:   store,
		Clock:   rep.clock,
		Metrics: cfg.Metrics,
	})
	if cfg.Metrics != nil {
		cfg.Metrics.MustRegister(newRaftCollector(rep), rep.apply)
	}
	return rep, nil
}

// propose writes one command through Raft and waits until it is applied
// here. The returned error is either a replication failure (ErrNotLeader,
// a timeout) or the command's business error from the state machine.
func (r *replica) propose(ctx context.Context, cmd *corpusv1.Command) (uint64, error) {
	if r.raft.State() != raft.Leader {
		return 0, r.notLeader()
	}
	if cmd.GetBatch() != nil {
		// Batch entries are the committer's to make, of single writes.
		return 0, api.Invalidf("a batch is not a write: propose its commands one by one")
	}
	// No entry some replica of the group could not apply: the cluster
	// version only rises, so one allowed now stays allowed when it
	// applies.
	if err := compat.Gate(r.store.Read().ClusterVersion(), cmd); err != nil {
		return 0, err
	}
	data, err := state.Encode(cmd, r.clock.Now())
	if err != nil {
		return 0, fmt.Errorf("encoding command: %w", err)
	}
	// The context bounds how long the write may wait to be enqueued; once
	// enqueued, a write commits or fails as Raft decides.
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("proposing command: %w", context.DeadlineExceeded)
	}
	start := time.Now()
	res, err := r.commit.Propose(ctx, cmd, data)
	r.apply.Observe(time.Since(start).Seconds())
	if err != nil {
		if aerr := r.refused(err); aerr != nil {
			return 0, aerr
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return 0, err
		}
		return 0, fmt.Errorf("replicating command: %w", err)
	}
	return res.Index, res.Err
}

// refused is the API's answer for a Raft future's error that says the
// leader could not take the change (or was deposed while committing
// it), which clients retry; nil for any other error.
func (r *replica) refused(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Refused before it was logged: it did not happen. A leader
		// handing over (it is stopping) takes nothing new either.
		return r.notLeader()
	case errors.Is(err, raft.ErrLeadershipLost):
		// Logged, then deposed: the next leader may still commit it.
		// Clients may send it again (writes are idempotent), but must
		// not take it as not done.
		return fmt.Errorf("%w (leadership was lost while the write was being committed: %w)", api.ErrNotLeader, rpc.ErrMaybeDone)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		// Refused before it was logged, too.
		return fmt.Errorf("%w: the leader's write queue stayed full, the write was not taken (retry shortly)", api.ErrBusy)
	}
	return nil
}

func (r *replica) notLeader() error {
	if l := r.leaderAddr(); l != "" {
		return fmt.Errorf("%w (the leader is %s)", api.ErrNotLeader, l)
	}
	return fmt.Errorf("%w (no leader is elected yet; retry shortly)", api.ErrNotLeader)
}

// barrier waits until every entry committed before this replica became
// leader is applied to its store, so leader duties start from the
// latest state.
func (r *replica) barrier(timeout time.Duration) error {
	return r.raft.Barrier(timeout).Error()
}

// quiet keeps the leader's log from growing until release is called:
// the committer hands Raft no entry, no membership change starts, and
// every entry logged before is applied here. last is the log's last
// index then, which stays its last while quiet: an entry Raft appends
// for a request of this replica's own (a user restore) gets last+1.
func (r *replica) quiet(ctx context.Context, timeout time.Duration) (last uint64, release func(), err error) {
	hold, err := r.commit.Hold(ctx)
	if err != nil {
		return 0, nil, err
	}
	r.members.Lock()
	release = func() {
		r.members.Unlock()
		hold()
	}
	// Barrier's own entry, and the leader's first one of its term, are
	// applied once it returns.
	if err := r.barrier(timeout); err != nil {
		release()
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			// Deposed meanwhile (an election, on a loaded machine):
			// nothing was done, and the caller asks the new leader.
			return 0, nil, r.notLeader()
		}
		return 0, nil, err
	}
	return r.raft.LastIndex(), release, nil
}

func (r *replica) isLeader() bool { return r.raft.State() == raft.Leader }

func (r *replica) leaderAddr() string {
	addr, _ := r.raft.LeaderWithID()
	return string(addr)
}

// snapshot forces a snapshot now (used by tests and operators).
func (r *replica) snapshot() error {
	return r.raft.Snapshot().Error()
}

func (r *replica) close() error {
	// The transport closes before Raft's goroutines are waited for, so
	// RPCs from peers parked on a consumer that has gone return at once
	// instead of holding their senders until the transport's timeout.
	shutdown := r.raft.Shutdown()
	r.commit.Close()
	r.transport.Close()
	err := shutdown.Error()
	if cerr := r.logs.Close(); err == nil {
		err = cerr
	}
	return err
}
