package deploy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/internal/metrics"
)

// deployMetrics are the pipeline's Prometheus metrics: pushes by outcome
// and how long they took.
type deployMetrics struct {
	deploys        *prometheus.CounterVec
	deployDuration *prometheus.HistogramVec
}

// deployOutcomes are the ends of a push: live, failed (rolled back), or
// rejected before a release began (a bad ref, a lock held, a bad tree).
var deployOutcomes = []string{"succeeded", "failed", "rejected"}

func newMetrics(reg prometheus.Registerer) *deployMetrics {
	m := &deployMetrics{
		deploys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Name: "deploys_total",
			Help: "git push deploys by outcome: succeeded (live), failed (rolled back), rejected (refused before a release began).",
		}, []string{"outcome"}),
		deployDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Name: "deploy_duration_seconds",
			Help:    "Time from a push reaching the agent to its deploy's outcome, by outcome.",
			Buckets: []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
		}, []string{"outcome"}),
	}
	reg.MustRegister(m.deploys, m.deployDuration)
	for _, o := range deployOutcomes {
		m.deploys.WithLabelValues(o)
	}
	return m
}

// deployed records one push's outcome.
func (m *deployMetrics) deployed(outcome string, took time.Duration) {
	m.deploys.WithLabelValues(outcome).Inc()
	m.deployDuration.WithLabelValues(outcome).Observe(took.Seconds())
}
