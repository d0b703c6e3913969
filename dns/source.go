package dns

import (
	"sync"
	"sync/atomic"
)

// RecordSource supplies the zone a server answers from.
//
// Snapshot returns the current zone and a channel that is closed once a
// newer zone is available; the caller then calls Snapshot again. The zone is
// shared and immutable: callers must not modify it. Snapshot is called on
// every query, so it must be cheap and must not block.
type RecordSource interface {
	Snapshot() (*Zone, <-chan struct{})
}

// StaticSource is an in-memory RecordSource whose zone is replaced with Set.
// The zero value is not usable; call NewStaticSource.
type StaticSource struct {
	mu  sync.Mutex // serializes Set
	cur atomic.Pointer[snapshot]
}

type snapshot struct {
	zone    *Zone
	changed chan struct{}
}

var _ RecordSource = (*StaticSource)(nil)

// NewStaticSource returns a source holding z.
func NewStaticSource(z *Zone) *StaticSource {
	s := &StaticSource{}
	s.cur.Store(&snapshot{zone: z, changed: make(chan struct{})})
	return s
}

// Snapshot implements RecordSource.
func (s *StaticSource) Snapshot() (*Zone, <-chan struct{}) {
	c := s.cur.Load()
	return c.zone, c.changed
}

// Set replaces the zone and wakes everyone waiting on the previous
// snapshot. The source takes ownership of z.
func (s *StaticSource) Set(z *Zone) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.cur.Load()
	s.cur.Store(&snapshot{zone: z, changed: make(chan struct{})})
	close(old.changed)
}
