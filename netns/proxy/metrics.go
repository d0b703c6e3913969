package proxy

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/internal/metrics"
)

// noRoute is the route label of requests for a host with no route.
const noRoute = "none"

// proxyMetrics are the proxy's Prometheus metrics. The route label is a
// configured route's host (or noRoute), never a client's Host header, so
// series are bounded by the routes; a route's series go with it.
type proxyMetrics struct {
	requests       *prometheus.CounterVec
	upstreamErrors *prometheus.CounterVec
	duration       *prometheus.HistogramVec
}

func newProxyMetrics(reg prometheus.Registerer, c *counters) *proxyMetrics {
	m := &proxyMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "proxy", Name: "requests_total",
			Help: "HTTP(S) requests by route (the configured host, none when no route matched) and status: the target's, or the proxy's own 404, 502, 504, and 499 for a client gone before the answer.",
		}, []string{"route", "status"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "proxy", Name: "upstream_errors_total",
			Help: "Requests whose target failed, by route and reason: dial (unreachable), timeout, broken (closed the connection or answered badly).",
		}, []string{"route", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: "proxy", Name: "request_duration_seconds",
			Help:    "Time to serve a routed request, from its headers read to the end of the answer, by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 3, 12),
		}, []string{"route"}),
	}
	active := func(protocol string, v func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: metrics.Namespace, Subsystem: "proxy", Name: "active_connections",
			Help:        "Client connections open now, by protocol: http (HTTP and HTTPS, not upgraded) and tcp (TCP routes).",
			ConstLabels: prometheus.Labels{"protocol": protocol},
		}, v)
	}
	reg.MustRegister(m.requests, m.upstreamErrors, m.duration,
		active("http", func() float64 { return float64(c.conns.Load()) }),
		active("tcp", func() float64 { return float64(c.tcpActive.Load()) }))
	return m
}

func (m *proxyMetrics) answered(route string, status int) {
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
}

func (m *proxyMetrics) served(route string, start time.Time) {
	m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
}

// forget drops the series of routes no longer configured.
func (m *proxyMetrics) forget(old, now map[string]*httpRoute) {
	for host := range old {
		if _, ok := now[host]; !ok {
			l := prometheus.Labels{"route": host}
			m.requests.DeletePartialMatch(l)
			m.upstreamErrors.DeletePartialMatch(l)
			m.duration.DeletePartialMatch(l)
		}
	}
}
