package deploy

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/internal/metrics/metricstest"
)

// TestDeployMetrics: deploys count by project and outcome; every outcome
// of a project is exported, 0, from its first deploy on; other projects'
// series are their own.
func TestDeployMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.deployed("hello", "succeeded", 3*time.Second)
	m.deployed("hello", "rejected", time.Millisecond)
	m.deployed("shop", "failed", time.Second)
	exposition := metricstest.Text(t, reg)
	for _, tc := range []struct {
		project, outcome string
		want             float64
	}{
		{"hello", "succeeded", 1}, {"hello", "failed", 0}, {"hello", "rejected", 1},
		{"shop", "succeeded", 0}, {"shop", "failed", 1}, {"shop", "rejected", 0},
	} {
		got, ok := metricstest.Exposed(t, exposition, "corpus_deploys_total", "project", tc.project, "outcome", tc.outcome)
		if !ok || got != tc.want {
			t.Errorf("deploys_total{%s, %s} = %v (exposed: %v), want %v", tc.project, tc.outcome, got, ok, tc.want)
		}
	}
	if n := metricstest.HistogramCount(t, reg, "corpus_deploy_duration_seconds", "project", "shop", "outcome", "failed"); n != 1 {
		t.Errorf("deploy_duration_seconds{shop, failed} count = %d, want 1", n)
	}
}
