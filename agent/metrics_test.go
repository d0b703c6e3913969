package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/drivers"
	"corpus/internal/metrics/metricstest"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestReconcileMetrics: a failed reconcile is counted under the step it
// failed at, through any wrapping; every reconcile is timed.
func TestReconcileMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := newAgentMetrics(reg)
	m.reconciled("lxc", 20*time.Millisecond, nil)
	m.reconciled("lxc", time.Second, fmt.Errorf("guest web: %w", atStep("start", fmt.Errorf("starting: %w", drivers.ErrNotFound))))
	m.reconciled("lxc", time.Second, errors.New("unmarked"))
	if n := metricstest.HistogramCount(t, reg, "corpus_agent_reconcile_duration_seconds", "driver", "lxc"); n != 3 {
		t.Errorf("reconcile_duration_seconds{lxc} count = %d, want 3", n)
	}
	for step, want := range map[string]float64{"start": 1, "other": 1, "create": 0} {
		if got := metricstest.Value(t, reg, "corpus_agent_reconcile_errors_total", "driver", "lxc", "step", step); got != want {
			t.Errorf("reconcile_errors_total{lxc, %s} = %v, want %v", step, got, want)
		}
	}
	if err := atStep("start", fmt.Errorf("x: %w", drivers.ErrNotFound)); !errors.Is(err, drivers.ErrNotFound) || err.Error() != "x: "+drivers.ErrNotFound.Error() {
		t.Errorf("atStep changed the error: %v", err)
	}
	if atStep("start", nil) != nil {
		t.Errorf("atStep(nil) is not nil")
	}
}

// TestVolumeCollector: volumes are exported as last observed, by name;
// one not yet observed is left out.
func TestVolumeCollector(t *testing.T) {
	t.Parallel()
	a := &Agent{
		volumes: []*corpusv1.Volume{{Id: "v1", Name: "data"}, {Id: "v2", Name: "fresh"}},
		volObserved: map[string]*corpusv1.VolumeObserved{
			"v1": {SizeBytes: 1 << 30, UsedBytes: 5 << 20},
		},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newVolumeCollector(a))
	if got := metricstest.Value(t, reg, "corpus_volume_size_bytes", "volume", "data"); got != 1<<30 {
		t.Errorf("volume_size_bytes{data} = %v, want %v", got, 1<<30)
	}
	if got := metricstest.Value(t, reg, "corpus_volume_used_bytes", "volume", "data"); got != 5<<20 {
		t.Errorf("volume_used_bytes{data} = %v, want %v", got, 5<<20)
	}
	a.mu.Lock()
	a.volObserved["v1"] = &corpusv1.VolumeObserved{SizeBytes: 2 << 30, UsedBytes: 6 << 20}
	a.mu.Unlock()
	if got := metricstest.Value(t, reg, "corpus_volume_size_bytes", "volume", "data"); got != 2<<30 {
		t.Errorf("volume_size_bytes{data} after growing = %v, want %v", got, 2<<30)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if len(mf.Metric) != 1 {
			t.Errorf("%s has %d series, want 1 (fresh is not observed yet)", mf.GetName(), len(mf.Metric))
		}
	}
}
