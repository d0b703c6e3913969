package deploy

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/internal/metrics/metricstest"
)

// TestDeployMetrics: every outcome is exported from the start, and each
// push counts under its own.
func TestDeployMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.deployed("succeeded", 3*time.Second)
	m.deployed("rejected", time.Millisecond)
	for outcome, want := range map[string]float64{"succeeded": 1, "failed": 0, "rejected": 1} {
		if got := metricstest.Value(t, reg, "corpus_deploys_total", "outcome", outcome); got != want {
			t.Errorf("deploys_total{%s} = %v, want %v", outcome, got, want)
		}
	}
}
