package pki

import (
	"crypto/x509"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ExpiryCollector exports when each certificate a component holds
// expires, read at scrape time so a renewed one is seen at once: as a
// Unix timestamp (corpus_certificate_expiry_timestamp_seconds, what an
// alert compares with time()) and as the seconds left
// (corpus_certificate_expiry_seconds, negative once expired).
type ExpiryCollector struct {
	certs    func() map[string]*x509.Certificate
	left, at *prometheus.Desc
	now      func() time.Time
}

// NewExpiryCollector returns a collector of component's certificates
// (the label "component": "coordinator", "agent"; one process may run
// both, as corpus dev does). certs names each certificate (the label
// "certificate", e.g. "cluster_ca", "node") and is called at every
// scrape; a nil certificate is left out.
func NewExpiryCollector(component string, certs func() map[string]*x509.Certificate) *ExpiryCollector {
	labels := prometheus.Labels{"component": component}
	return &ExpiryCollector{
		certs: certs,
		now:   time.Now,
		left: prometheus.NewDesc("corpus_certificate_expiry_seconds",
			"Seconds until the certificate expires (negative once it has).",
			[]string{"certificate"}, labels),
		at: prometheus.NewDesc("corpus_certificate_expiry_timestamp_seconds",
			"When the certificate expires, in seconds since the Unix epoch (its NotAfter).",
			[]string{"certificate"}, labels),
	}
}

// Describe implements prometheus.Collector.
func (c *ExpiryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.left
	ch <- c.at
}

// Collect implements prometheus.Collector.
func (c *ExpiryCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	for name, cert := range c.certs() {
		if cert != nil {
			ch <- prometheus.MustNewConstMetric(c.left, prometheus.GaugeValue, cert.NotAfter.Sub(now).Seconds(), name)
			ch <- prometheus.MustNewConstMetric(c.at, prometheus.GaugeValue, float64(cert.NotAfter.Unix()), name)
		}
	}
}
