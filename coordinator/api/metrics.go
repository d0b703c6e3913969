package api

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"corpus/internal/metrics"
)

// Metrics count and time the API's calls by procedure and outcome. The
// procedures are the ones served (bounded by the API); codes are
// connect's.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the API's metrics into reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "api", Name: "requests_total",
			Help: "API calls answered, by procedure and code (ok, or the connect error code); streams count when they end.",
		}, []string{"procedure", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: "api", Name: "request_duration_seconds",
			Help:    "Time to answer a unary API call, by procedure; streams (watch, exec) are left out.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 3, 11),
		}, []string{"procedure"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// Interceptor records every call it wraps; put it first, so refusals by
// the others are counted too.
func (m *Metrics) Interceptor() connect.Interceptor { return metricsInterceptor{m} }

type metricsInterceptor struct{ m *Metrics }

func codeLabel(err error) string {
	if err == nil {
		return "ok"
	}
	return connect.CodeOf(err).String()
}

func (i metricsInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		start := time.Now()
		res, err := next(ctx, req)
		proc := req.Spec().Procedure
		i.m.duration.WithLabelValues(proc).Observe(time.Since(start).Seconds())
		i.m.requests.WithLabelValues(proc, codeLabel(err)).Inc()
		return res, err
	}
}

func (i metricsInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i metricsInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		err := next(ctx, conn)
		i.m.requests.WithLabelValues(conn.Spec().Procedure, codeLabel(err)).Inc()
		return err
	}
}
