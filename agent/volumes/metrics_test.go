package volumes

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/internal/metrics/metricstest"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestVolumeCollector: volumes are exported as last observed, by name;
// one not yet observed is left out.
func TestVolumeCollector(t *testing.T) {
	t.Parallel()
	m := New(Config{})
	m.Set([]*corpusv1.Volume{{Id: "v1", Name: "data"}, {Id: "v2", Name: "fresh"}})
	m.observed["v1"] = &corpusv1.VolumeObserved{SizeBytes: 1 << 30, UsedBytes: 5 << 20}
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector(m))
	if got := metricstest.Value(t, reg, "corpus_volume_size_bytes", "volume", "data"); got != 1<<30 {
		t.Errorf("volume_size_bytes{data} = %v, want %v", got, 1<<30)
	}
	if got := metricstest.Value(t, reg, "corpus_volume_used_bytes", "volume", "data"); got != 5<<20 {
		t.Errorf("volume_used_bytes{data} = %v, want %v", got, 5<<20)
	}
	m.mu.Lock()
	m.observed["v1"] = &corpusv1.VolumeObserved{SizeBytes: 2 << 30, UsedBytes: 6 << 20}
	m.mu.Unlock()
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
