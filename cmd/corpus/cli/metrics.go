package cli

import (
	"context"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

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

// withMetrics binds the metrics server of reg on addr (none when addr is
// empty), runs f, and stops the server once f returns. The server's URL
// is handed to f ("" when off). A metrics listener that cannot be bound
// stops the daemon before it starts, like its other listeners.
func withMetrics(ctx context.Context, addr string, reg prometheus.Gatherer, logger *slog.Logger, f func(ctx context.Context, url string) error) error {
	if addr == "" {
		return f(ctx, "")
	}
	ms, err := metrics.Listen(addr, reg, logger)
	if err != nil {
		return err
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
