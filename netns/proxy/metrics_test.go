package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"corpus/internal/metrics/metricstest"
)

// TestProxyMetrics: requests are counted by configured route and status
// (a client's Host never makes a series), target failures by reason,
// open connections are seen, and a route's series go with the route.
func TestProxyMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	p := startProxy(t, Config{Metrics: reg})
	ok := startBackend(t, "web", nil)
	teapot := startBackend(t, "tea", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	mustSetRoutes(t, p, httpRoutes("web.example", ok.addr(), "tea.example", teapot.addr(), "down.example", closedAddr(t)))
	c := proxyClient(t, p.HTTPAddr().String(), nil)
	for range 3 {
		do(t, c, "GET", "web.example", "/", nil)
	}
	do(t, c, "GET", "tea.example", "/", nil)
	if code, _, _ := do(t, c, "GET", "down.example", "/", nil); code != http.StatusBadGateway {
		t.Errorf("down.example answered %d, want 502", code)
	}
	do(t, c, "GET", "random-1.example", "/", nil)
	do(t, c, "GET", "random-2.example", "/", nil)

	want := `
# HELP corpus_proxy_requests_total HTTP(S) requests by route (the configured host, none when no route matched) and status: the target's, or the proxy's own 404, 502, 504, and 499 for a client gone before the answer.
# TYPE corpus_proxy_requests_total counter
corpus_proxy_requests_total{route="down.example",status="502"} 1
corpus_proxy_requests_total{route="none",status="404"} 2
corpus_proxy_requests_total{route="tea.example",status="418"} 1
corpus_proxy_requests_total{route="web.example",status="200"} 3
# HELP corpus_proxy_upstream_errors_total Requests whose target failed, by route and reason: dial (unreachable), timeout, broken (closed the connection or answered badly).
# TYPE corpus_proxy_upstream_errors_total counter
corpus_proxy_upstream_errors_total{reason="dial",route="down.example"} 1
`
	if got := p.Requests(); len(got) != 3 || got["web.example"] != 3 || got["tea.example"] != 1 || got["down.example"] != 1 {
		t.Errorf("Requests() = %v; want the routed hosts' counts, every status", got)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "corpus_proxy_requests_total", "corpus_proxy_upstream_errors_total"); err != nil {
		t.Error(err)
	}
	if n := metricstest.HistogramCount(t, reg, "corpus_proxy_request_duration_seconds", "route", "web.example"); n != 3 {
		t.Errorf("request_duration_seconds{web.example} count = %d, want 3", n)
	}
	// The client keeps its connection alive.
	if got := metricstest.Value(t, reg, "corpus_proxy_active_connections", "protocol", "http"); got < 1 {
		t.Errorf("active_connections{http} = %v, want at least 1 kept alive", got)
	}

	mustSetRoutes(t, p, httpRoutes("web.example", ok.addr()))
	if got := metricstest.Value(t, reg, "corpus_proxy_requests_total", "route", "tea.example"); got != 0 {
		t.Errorf("requests_total{tea.example} after its route went = %v, want no series", got)
	}
	if got := metricstest.Value(t, reg, "corpus_proxy_requests_total", "route", "web.example"); got != 3 {
		t.Errorf("requests_total{web.example} after another route went = %v, want 3 kept", got)
	}
}
