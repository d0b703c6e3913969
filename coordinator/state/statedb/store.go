package statedb

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/internal/clock"
	corpusv1 "corpus/proto/corpus/v1"
)

// Store holds the state. Writes happen only through the FSM; every other
// user reads.
type Store struct {
	mu      sync.RWMutex
	db      *memdb.MemDB
	abandon chan struct{}
	// applied is the Raft index of the last log entry the state machine
	// applied, whatever its outcome (the state's own index moves only
	// with successful writes).
	applied atomic.Uint64
	// appliedCh is closed when applied next moves (nil while no one
	// waits: see WaitApplied); appliedMu guards it.
	appliedMu sync.Mutex
	appliedCh chan struct{}
	// appliedTime is the cluster's time: the latest stamp of an applied
	// entry (see FSM.clusterTime).
	appliedTime atomic.Pointer[timestamppb.Timestamp]
}

// Now is the time of day by c, but never before the cluster's time: what
// the API dates (expiries) and judges expiry by, so that it agrees with
// the state machine, which judges by the cluster's time. A replica whose
// clock runs behind the latest leader's takes the leader's.
func (s *Store) Now(c clock.Clock) time.Time {
	now := clock.Or(c).Now()
	if ct := s.AppliedTime(); ct.After(now) {
		return ct
	}
	return now
}

// AppliedTime is the cluster's time as of the last applied entry (the
// latest stamp a leader gave one); zero before any.
func (s *Store) AppliedTime() time.Time {
	if t := s.appliedTime.Load(); t != nil {
		return t.AsTime()
	}
	return time.Time{}
}

// Applied is the Raft index of the last entry applied to the store:
// once it reaches a write's index, reads here see that write. Raft's own
// applied index may run ahead of it (entries are handed to the state
// machine before they are applied).
func (s *Store) Applied() uint64 { return s.applied.Load() }

// NewStore returns an empty store.
func NewStore() *Store {
	db, err := NewDB()
	if err != nil {
		panic(fmt.Sprintf("state schema: %v", err)) // a programming error
	}
	return &Store{db: db, abandon: make(chan struct{})}
}

// AbandonCh is closed when the store's contents are replaced by a restore;
// blocking queries add it to their watch set and re-read after it fires.
func (s *Store) AbandonCh() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.abandon
}

func (s *Store) memdb() *memdb.MemDB {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.db
}

// The state machine's side: it alone writes the store, through these.

// NewDB returns an empty database of the state's tables, for a restore
// to fill and hand to Replace.
func NewDB() (*memdb.MemDB, error) { return memdb.NewMemDB(schema()) }

// Write opens a write transaction on the database.
func (s *Store) Write() *memdb.Txn { return s.memdb().Txn(true) }

// View reads through txn, a write transaction's own writes included.
func View(txn *memdb.Txn) *Snap { return &Snap{txn: txn, ws: memdb.NewWatchSet()} }

// SetApplied records the Raft index of the last entry applied and wakes
// those waiting in WaitApplied.
func (s *Store) SetApplied(index uint64) {
	s.applied.Store(index)
	s.appliedMu.Lock()
	if s.appliedCh != nil {
		close(s.appliedCh)
		s.appliedCh = nil
	}
	s.appliedMu.Unlock()
}

// WaitApplied blocks until Applied reaches index, or ctx ends; it says
// whether Applied got there. A follower answering a write it passed to
// the leader waits here for the entry to be applied locally: at once
// when the entry is, not at a poll's next tick.
func (s *Store) WaitApplied(ctx context.Context, index uint64) bool {
	for {
		s.appliedMu.Lock()
		if s.applied.Load() >= index {
			s.appliedMu.Unlock()
			return true
		}
		if s.appliedCh == nil {
			s.appliedCh = make(chan struct{})
		}
		ch := s.appliedCh
		s.appliedMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return s.applied.Load() >= index
		}
	}
}

// ClusterTime is the cluster's time as AppliedTime, as the stamp itself:
// nil before any entry was applied.
func (s *Store) ClusterTime() *timestamppb.Timestamp { return s.appliedTime.Load() }

// SetClusterTime moves the cluster's time to t.
func (s *Store) SetClusterTime(t *timestamppb.Timestamp) { s.appliedTime.Store(t) }

// Replace swaps the whole database (snapshot restore) and wakes watchers.
func (s *Store) Replace(db *memdb.MemDB) {
	s.mu.Lock()
	old := s.abandon
	s.db = db
	s.abandon = make(chan struct{})
	s.mu.Unlock()
	close(old)
}

// Snap is a consistent read-only view of the state at one index.
type Snap struct {
	txn *memdb.Txn
	ws  memdb.WatchSet
}

// Read opens a consistent view. The view collects watch channels of what
// it reads; Wait blocks until any of them fires.
func (s *Store) Read() *Snap {
	ws := memdb.NewWatchSet()
	ws.Add(s.AbandonCh())
	return &Snap{txn: s.memdb().Txn(false), ws: ws}
}

// Wait blocks until something read through this view changes, or ctx ends.
// It returns ctx.Err() when ctx ended first.
func (v *Snap) Wait(ctx context.Context) error {
	return v.ws.WatchCtx(ctx)
}

// WatchCh is Wait in the background: the channel gets Wait's result.
func (v *Snap) WatchCh(ctx context.Context) <-chan error {
	return v.ws.WatchCh(ctx)
}

// Index is the Raft index of the last applied command.
func (v *Snap) Index() uint64 {
	raw, err := v.txn.First(TableMeta, "id", MetaIndex)
	if err != nil || raw == nil {
		return 0
	}
	return raw.(*Meta).Value.(uint64)
}

// WatchIndex makes Wait return on any change at all.
func (v *Snap) WatchIndex() uint64 {
	ch, raw, err := v.txn.FirstWatch(TableMeta, "id", MetaIndex)
	if err == nil {
		v.ws.Add(ch)
	}
	if raw == nil {
		return 0
	}
	return raw.(*Meta).Value.(uint64)
}

// Config returns the cluster configuration, nil before bootstrap.
func (v *Snap) Config() *corpusv1.ClusterConfig {
	ch, raw, err := v.txn.FirstWatch(TableMeta, "id", MetaConfig)
	if err != nil {
		return nil
	}
	v.ws.Add(ch)
	if raw == nil {
		return nil
	}
	return raw.(*Meta).Value.(*corpusv1.ClusterConfig)
}

// Node returns the node with that id, or nil.
func (v *Snap) Node(id string) *corpusv1.Node {
	return first[*corpusv1.Node](v, TableNodes, "id", id)
}

// NodeByName returns the node with that name, or nil.
func (v *Snap) NodeByName(name string) *corpusv1.Node {
	return first[*corpusv1.Node](v, TableNodes, "name", name)
}

// Nodes returns every node sorted by name.
func (v *Snap) Nodes() []*corpusv1.Node {
	out := all[*corpusv1.Node](v, TableNodes, "id")
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// WatchNodes makes Wait return when any node changes, without reading
// them, and returns that watch channel: the same one as long as no node
// changed, a key for what is derived from all nodes.
func (v *Snap) WatchNodes() <-chan struct{} {
	it, err := v.txn.Get(TableNodes, "id")
	if err != nil {
		return nil
	}
	v.ws.Add(it.WatchCh())
	return it.WatchCh()
}

// Guest returns the guest with that id, or nil.
func (v *Snap) Guest(id string) *corpusv1.Guest {
	return first[*corpusv1.Guest](v, TableGuests, "id", id)
}

// GuestByName returns the guest with that name, or nil.
func (v *Snap) GuestByName(name string) *corpusv1.Guest {
	return first[*corpusv1.Guest](v, TableGuests, "name", name)
}

// Guests returns every guest sorted by name.
func (v *Snap) Guests() []*corpusv1.Guest {
	// The name index is unique and ordered (names hold no byte below
	// '-', so its terminating NUL orders as the end of the string does).
	return all[*corpusv1.Guest](v, TableGuests, "name")
}

// GuestsOnNode returns the guests placed on a node, sorted by name.
func (v *Snap) GuestsOnNode(nodeID string) []*corpusv1.Guest {
	out := all[*corpusv1.Guest](v, TableGuests, "node", nodeID)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Token returns the join token with that id, or nil.
func (v *Snap) Token(id string) *corpusv1.JoinToken {
	return first[*corpusv1.JoinToken](v, TableTokens, "id", id)
}

func first[T any](v *Snap, table, index string, args ...any) T {
	var zero T
	ch, raw, err := v.txn.FirstWatch(table, index, args...)
	if err != nil {
		return zero
	}
	v.ws.Add(ch)
	if raw == nil {
		return zero
	}
	return raw.(T)
}

func all[T any](v *Snap, table, index string, args ...any) []T {
	it, err := v.txn.Get(table, index, args...)
	if err != nil {
		return nil
	}
	v.ws.Add(it.WatchCh())
	var out []T
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(T))
	}
	return out
}
