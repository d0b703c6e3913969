package metrics_test

import (
	"bytes"
	"context"
	"io"
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

// TestProfiles: Go's runtime profiles are served only when asked for.
func TestProfiles(t *testing.T) {
	t.Parallel()
	for _, profiles := range []bool{false, true} {
		s, err := metrics.Listen("127.0.0.1:0", metrics.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if profiles {
			s.ServeProfiles()
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx) }()
		res, err := http.Get("http://" + s.Addr() + "/debug/pprof/goroutine?debug=1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		cancel()
		<-done
		switch {
		case profiles && (res.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("goroutine profile:"))):
			t.Errorf("with profiles: GET /debug/pprof/goroutine = %s\n%s", res.Status, body)
		case !profiles && res.StatusCode != http.StatusNotFound:
			t.Errorf("without profiles: GET /debug/pprof/goroutine = %s, want 404", res.Status)
		}
	}
}
