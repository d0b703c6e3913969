package daemon

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"corpus/internal/metrics"
)

// Default metrics listen addresses: loopback, one port per daemon kind so
// a coordinator and an agent on one host do not clash.
const (
	defaultCoordinatorMetricsAddr = "127.0.0.1:9464"
	defaultAgentMetricsAddr       = "127.0.0.1:9465"
	defaultK8sAgentMetricsAddr    = "127.0.0.1:9466"
)

const metricsAddrUsage = "Prometheus metrics listen address, served on /metrics (empty: off)"

// metricsFlags are a daemon's metrics listener and what it serves.
type metricsFlags struct {
	addr     string
	profiles bool
}

func (m *metricsFlags) add(f *pflag.FlagSet, usage string) {
	f.StringVar(&m.addr, "metrics-addr", m.addr, usage)
	f.BoolVar(&m.profiles, "debug-profiles", false, "also serve Go's runtime profiles on the metrics address, under /debug/pprof/ (go tool pprof)")
}

// withMetrics binds the metrics server of reg on m.addr (none when it is
// empty), runs f, and stops the server once f returns. The server's URL
// is handed to f ("" when off). A metrics listener that cannot be bound
// stops the daemon before it starts, like its other listeners.
func withMetrics(ctx context.Context, m metricsFlags, reg prometheus.Gatherer, logger *slog.Logger, f func(ctx context.Context, url string) error) error {
	sampleHeap(m.profiles)
	if m.addr == "" {
		if m.profiles {
			return errors.New("--debug-profiles needs --metrics-addr")
		}
		return f(ctx, "")
	}
	ms, err := metrics.Listen(m.addr, reg, logger)
	if err != nil {
		return err
	}
	if m.profiles {
		ms.ServeProfiles()
	}
	mctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := ms.Serve(mctx); err != nil {
			logger.Error("metrics server stopped", "error", err)
		}
	})
	defer wg.Wait()
	defer stop()
	return f(ctx, ms.URL())
}

// sampleHeap turns the runtime's sampling of allocations for the heap
// profile off unless the daemon serves its profiles. Nothing else reads
// them, and the table of sampled allocation stacks only grows: 1.4 MiB
// of hash buckets once sampling starts, and a record more for every new
// stack, for the life of the process.
func sampleHeap(profiles bool) {
	if !profiles {
		runtime.MemProfileRate = 0
	}
}
