package daemon

import (
	"context"
	"log/slog"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestHeapSampledOnlyForProfiles: a daemon samples allocations for the
// heap profile only when it serves its profiles.
func TestHeapSampledOnlyForProfiles(t *testing.T) {
	def := runtime.MemProfileRate
	t.Cleanup(func() { runtime.MemProfileRate = def })
	for _, tc := range []struct {
		m    metricsFlags
		want int
	}{
		{metricsFlags{}, 0},
		{metricsFlags{addr: "127.0.0.1:0"}, 0},
		{metricsFlags{addr: "127.0.0.1:0", profiles: true}, def},
	} {
		runtime.MemProfileRate = def
		var got int
		err := withMetrics(context.Background(), tc.m, prometheus.NewRegistry(), slog.New(slog.DiscardHandler), func(context.Context, string) error {
			got = runtime.MemProfileRate
			return nil
		})
		if err != nil {
			t.Fatalf("withMetrics(%+v): %v", tc.m, err)
		}
		if got != tc.want {
			t.Errorf("withMetrics(%+v): MemProfileRate = %d, want %d", tc.m, got, tc.want)
		}
	}
}
