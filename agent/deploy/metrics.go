package deploy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/internal/metrics"
)

// deployMetrics are the pipeline's Prometheus metrics: deploys by
// project and outcome, and how long they took. The project label takes
// only the names of projects the coordinator let deploy here (a push to
// any other name is refused before the pipeline), so its values are
// bounded by the projects with an environment on this node.
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
			Help: "Deploys (git pushes, config changes, restarts, deploys of the serving commit) by project and outcome: succeeded (live), failed (rolled back), rejected (refused before a release began).",
		}, []string{"project", "outcome"}),
		deployDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Name: "deploy_duration_seconds",
			Help:    "Time from a deploy's start (a push reaching the agent) to its outcome, by project and outcome.",
			Buckets: []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
		}, []string{"project", "outcome"}),
	}
	reg.MustRegister(m.deploys, m.deployDuration)
	return m
}

// deployed records the outcome of one deploy of project. Every outcome
// of a project is exported from its first deploy on, 0 until it
// happens, so a first failure is a change of a series, not a new one.
func (m *deployMetrics) deployed(project, outcome string, took time.Duration) {
	for _, o := range deployOutcomes {
		m.deploys.WithLabelValues(project, o)
	}
	m.deploys.WithLabelValues(project, outcome).Inc()
	m.deployDuration.WithLabelValues(project, outcome).Observe(took.Seconds())
}
