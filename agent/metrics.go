package agent

import (
	"crypto/x509"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/agent/guests"
	"corpus/internal/metrics"
	"corpus/internal/pki"
	corpusv1 "corpus/proto/corpus/v1"
)

// agentMetrics are the agent's own Prometheus metrics: guest reconciles.
// Volumes and certificates are read at scrape time (volumes.Collector,
// pki.ExpiryCollector); the proxy and the deploy pipeline keep their own.
type agentMetrics struct {
	reconcile       *prometheus.HistogramVec
	reconcileErrors *prometheus.CounterVec
}

func newAgentMetrics(reg prometheus.Registerer) *agentMetrics {
	m := &agentMetrics{
		reconcile: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metrics.Namespace, Subsystem: "agent", Name: "reconcile_duration_seconds",
			Help:    "Time of one guest's reconcile: inspecting it and acting on the difference with what is desired, by driver.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 12),
		}, []string{"driver"}),
		reconcileErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "agent", Name: "reconcile_errors_total",
			Help: "Guest reconciles that failed, by driver and the step that failed.",
		}, []string{"driver", "step"}),
	}
	reg.MustRegister(m.reconcile, m.reconcileErrors)
	return m
}

// reconciled records one guest reconcile.
func (m *agentMetrics) reconciled(driver string, took time.Duration, err error) {
	m.reconcile.WithLabelValues(driver).Observe(took.Seconds())
	if err != nil {
		m.reconcileErrors.WithLabelValues(driver, guests.FailedStep(err)).Inc()
	}
}

// driverLabel is the driver of g when this node runs it, else "none"
// (the label stays bounded by the node's drivers).
func (a *Agent) driverLabel(g *corpusv1.Guest) string {
	if name := g.GetSpec().GetDriver(); a.drivers[name] != nil {
		return name
	}
	return "none"
}

// nodeCerts are the node's TLS material once it is enrolled, read by
// scrapes while the agent runs.
type nodeCerts struct {
	keys *pki.Keys
	ca   *x509.Certificate
}

// certificates are the node's certificates, for their expiry metric:
// its own and the cluster CA once enrolled, and the proxy's.
func (a *Agent) certificates() map[string]*x509.Certificate {
	out := map[string]*x509.Certificate{}
	if c := a.tlsCerts.Load(); c != nil {
		out["node"], out["cluster_ca"] = c.keys.Get().Leaf, c.ca
	}
	if a.net != nil {
		// An operator's HTTPS certificates, by their first name.
		for _, leaf := range a.net.Proxy().Certificates() {
			out["proxy "+leaf.DNSNames[0]] = leaf
		}
	}
	return out
}
