package scheduler

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/coordinator/state"
	"corpus/internal/metrics"
)

// Metrics are the scheduler's Prometheus metrics. The pending gauge is
// read from the state at scrape time, so every replica reports it, not
// only the leader that schedules.
type Metrics struct {
	placement  prometheus.Histogram
	placements *prometheus.CounterVec
}

// NewMetrics registers the scheduler's metrics into reg; store is the
// state pending guests are counted in.
func NewMetrics(reg prometheus.Registerer, store *state.Store) *Metrics {
	m := &Metrics{
		placement: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: "scheduler", Name: "placement_duration_seconds",
			Help:    "Time of a scheduling pass that changed placements: planning on the state and committing the plan through Raft.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}),
		placements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "scheduler", Name: "placements_total",
			Help: "Placement decisions committed, by result: placed on a node, or left pending for want of one.",
		}, []string{"result"}),
	}
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: "scheduler", Name: "pending_guests",
		Help: "Guests not placed on any node (and not being deleted).",
	}, func() float64 { return float64(Pending(store.Read())) })
	reg.MustRegister(m.placement, m.placements, pending)
	for _, r := range []string{"placed", "pending"} {
		m.placements.WithLabelValues(r)
	}
	return m
}

// Pending counts the guests of view that wait for a node.
func Pending(view *state.Snap) int {
	n := 0
	for _, g := range view.Guests() {
		if g.NodeId == "" && g.DesiredState != state.DesiredDeleted {
			n++
		}
	}
	return n
}

func (m *Metrics) observe(start time.Time, placed, pending int) {
	if m == nil {
		return
	}
	m.placement.Observe(time.Since(start).Seconds())
	m.placements.WithLabelValues("placed").Add(float64(placed))
	m.placements.WithLabelValues("pending").Add(float64(pending))
}
