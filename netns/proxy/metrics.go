package proxy

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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

// routeMetrics are the series of one route, looked up once per route and
// status code rather than once per request.
type routeMetrics struct {
	route    string
	requests *prometheus.CounterVec
	duration prometheus.Observer

	mu    sync.Mutex
	codes atomic.Pointer[[]codeCounter] // copied on write
}

type codeCounter struct {
	code int
	c    prometheus.Counter
}

// route returns the series of a route.
func (m *proxyMetrics) route(route string) *routeMetrics {
	return &routeMetrics{route: route, requests: m.requests, duration: m.duration.WithLabelValues(route)}
}

// answered counts an answer of the route with status.
func (rm *routeMetrics) answered(status int) {
	if codes := rm.codes.Load(); codes != nil {
		for _, cc := range *codes {
			if cc.code == status {
				cc.c.Inc()
				return
			}
		}
	}
	rm.mu.Lock()
	var codes []codeCounter
	if old := rm.codes.Load(); old != nil {
		codes = *old
	}
	c := rm.requests.WithLabelValues(rm.route, strconv.Itoa(status))
	codes = append(codes[:len(codes):len(codes)], codeCounter{status, c})
	rm.codes.Store(&codes)
	rm.mu.Unlock()
	c.Inc()
}

// served records the time a request of the route took.
func (rm *routeMetrics) served(start time.Time) {
	rm.duration.Observe(time.Since(start).Seconds())
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

// Requests returns the requests answered so far, by route host (those of
// hosts with no route left out): what a load sampler takes rates from.
// A route's count starts again from 0 when the route goes and comes back.
func (p *Proxy) Requests() map[string]uint64 { return p.answers(0) }

// Errors returns those of Requests answered with a status of 500 or above
// (the target's, or the proxy's own 502 and 504).
func (p *Proxy) Errors() map[string]uint64 { return p.answers(500) }

// answers counts the answers of status minStatus or above by route host.
func (p *Proxy) answers(minStatus int) map[string]uint64 {
	out := map[string]uint64{}
	ch := make(chan prometheus.Metric, 64)
	go func() {
		p.metrics.requests.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		route, status := "", 0
		for _, l := range d.GetLabel() {
			switch l.GetName() {
			case "route":
				route = l.GetValue()
			case "status":
				status, _ = strconv.Atoi(l.GetValue())
			}
		}
		if route != "" && route != noRoute && status >= minStatus {
			out[route] += uint64(d.GetCounter().GetValue())
		}
	}
	return out
}
