package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/agent/guests"
	"corpus/drivers"
	"corpus/internal/metrics/metricstest"
)

// TestReconcileMetrics: a failed reconcile is counted under the step it
// failed at, through any wrapping; every reconcile is timed.
func TestReconcileMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := newAgentMetrics(reg)
	m.reconciled("lxc", 20*time.Millisecond, nil)
	m.reconciled("lxc", time.Second, fmt.Errorf("guest web: %w", guests.AtStep("start", fmt.Errorf("starting: %w", drivers.ErrNotFound))))
	m.reconciled("lxc", time.Second, errors.New("unmarked"))
	if n := metricstest.HistogramCount(t, reg, "corpus_agent_reconcile_duration_seconds", "driver", "lxc"); n != 3 {
		t.Errorf("reconcile_duration_seconds{lxc} count = %d, want 3", n)
	}
	for step, want := range map[string]float64{"start": 1, "other": 1, "create": 0} {
		if got := metricstest.Value(t, reg, "corpus_agent_reconcile_errors_total", "driver", "lxc", "step", step); got != want {
			t.Errorf("reconcile_errors_total{lxc, %s} = %v, want %v", step, got, want)
		}
	}
	if err := guests.AtStep("start", fmt.Errorf("x: %w", drivers.ErrNotFound)); !errors.Is(err, drivers.ErrNotFound) || err.Error() != "x: "+drivers.ErrNotFound.Error() {
		t.Errorf("atStep changed the error: %v", err)
	}
	if guests.AtStep("start", nil) != nil {
		t.Errorf("AtStep(nil) is not nil")
	}
}
