package metrics_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/internal/metrics"
	"corpus/internal/metrics/metricstest"
)

// TestServer: a registry is served on /metrics with the runtime and
// process collectors, in a form promtool accepts, until the context ends.
func TestServer(t *testing.T) {
	t.Parallel()
	reg := metrics.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: "things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Add(3)
	s, err := metrics.Listen("127.0.0.1:0", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	body := metricstest.Scrape(t, s.URL())
	for _, want := range []string{"corpus_things_total 3\n", "go_goroutines ", "process_cpu_seconds_total "} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("scrape lacks %q:\n%s", want, body)
		}
	}
	metricstest.Promtool(t, body)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve = %v, want nil after the context ended", err)
	}
	if _, err := http.Get(s.URL()); err == nil {
		t.Errorf("the server still answers after it stopped")
	}
	if _, err := metrics.Listen("no-port", reg, nil); err == nil {
		t.Errorf("Listen(no-port) = nil error")
	}
}
