// Package series keeps the recent values of a few metrics in memory for
// the dashboard's plots: a Sampler, which every replica runs, samples the
// nodes' allocation and the domains' request and error rates into a
// small time series Store of fixed size per series. It is not a metrics
// database: values are lost on restart, each replica keeps its own, and a
// series keeps its last Capacity points.
package series

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Point is one value at one time.
type Point struct {
	At    time.Time
	Value float64
}

// Series is the points of one name and label set, oldest first.
type Series struct {
	Name   string
	Labels map[string]string
	Points []Point
}

// Store holds series of at most Capacity points each. A series that got
// no point for Capacity samples is dropped (a node or domain gone).
type Store struct {
	capacity int

	mu     sync.Mutex
	series map[string]*ring
	// samples counts Add rounds, for dropping series left behind.
	samples int
}

type ring struct {
	name   string
	labels map[string]string
	points []Point // at most capacity, oldest first
	last   int     // the sample round of the newest point
}

// New returns a store keeping capacity points per series.
func New(capacity int) *Store {
	if capacity < 1 {
		capacity = 1
	}
	return &Store{capacity: capacity, series: map[string]*ring{}}
}

// Sample is one value of a series taken in a round.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Add records one round of samples taken at once.
func (s *Store) Add(at time.Time, samples []Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	for _, m := range samples {
		k := key(m.Name, m.Labels)
		r := s.series[k]
		if r == nil {
			r = &ring{name: m.Name, labels: maps.Clone(m.Labels)}
			s.series[k] = r
		}
		if len(r.points) == s.capacity {
			r.points = append(r.points[:0], r.points[1:]...)
		}
		r.points = append(r.points, Point{At: at, Value: m.Value})
		r.last = s.samples
	}
	for k, r := range s.series {
		if s.samples-r.last >= s.capacity {
			delete(s.series, k)
		}
	}
}

// Get returns copies of the series of the given names (all when none),
// ordered by name and labels.
func (s *Store) Get(names ...string) []Series {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := slices.Sorted(maps.Keys(s.series))
	var out []Series
	for _, k := range keys {
		r := s.series[k]
		if len(names) > 0 && !slices.Contains(names, r.name) {
			continue
		}
		out = append(out, Series{Name: r.name, Labels: maps.Clone(r.labels), Points: slices.Clone(r.points)})
	}
	return out
}

// key names a series: its name and its labels in order.
func key(name string, labels map[string]string) string {
	var b strings.Builder
	b.WriteString(name)
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString("\x00" + k + "=" + labels[k])
	}
	return b.String()
}

// Rates turns counters read at two times into per-second rates by key. A
// counter lower than before was reset (a proxy restarted, a route came
// back): its new value is what it counted since. Keys only in the newer
// reading count from 0.
func Rates(before, after map[string]uint64, elapsed time.Duration) map[string]float64 {
	out := map[string]float64{}
	if elapsed <= 0 {
		return out
	}
	for k, v := range after {
		d := v
		if b, ok := before[k]; ok && b <= v {
			d = v - b
		}
		out[k] = float64(d) / elapsed.Seconds()
	}
	return out
}
