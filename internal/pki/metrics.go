package pki

import (
	"crypto/x509"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ExpiryCollector exports the seconds until each certificate a component
// holds expires, read at scrape time so a renewed one is seen at once.
// Negative values are certificates already expired.
type ExpiryCollector struct {
	certs func() map[string]*x509.Certificate
	desc  *prometheus.Desc
	now   func() time.Time
}

// NewExpiryCollector returns a collector of component's certificates
// (the label "component": "coordinator", "agent"; one process may run
// both, as corpus dev does). certs names each certificate (the label
// "certificate", e.g. "cluster_ca", "node") and is called at every
// scrape; a nil certificate is left out.
func NewExpiryCollector(component string, certs func() map[string]*x509.Certificate) *ExpiryCollector {
	return &ExpiryCollector{
		certs: certs,
		now:   time.Now,
		desc: prometheus.NewDesc("corpus_certificate_expiry_seconds",
			"Seconds until the certificate expires (negative once it has).",
			[]string{"certificate"}, prometheus.Labels{"component": component}),
	}
}

// Describe implements prometheus.Collector.
func (c *ExpiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *ExpiryCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	for name, cert := range c.certs() {
		if cert != nil {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, cert.NotAfter.Sub(now).Seconds(), name)
		}
	}
}
