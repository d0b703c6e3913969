package pki_test

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"corpus/internal/metrics/metricstest"
	"corpus/internal/pki"
)

// TestExpiryCollector: each named certificate's remaining life and
// expiry time are exported, and a renewal shows at the next scrape.
func TestExpiryCollector(t *testing.T) {
	ca := newCA(t)
	issue := func(ttl time.Duration) *x509.Certificate {
		c, k, _, err := ca.IssueKeyPair(pki.Request{Role: pki.RoleNode, ID: "n1", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		kp, err := pki.KeyPair(c, k, ca.CertPEM)
		if err != nil {
			t.Fatal(err)
		}
		return kp.Leaf
	}
	node := issue(time.Hour)
	col := pki.NewExpiryCollector("agent", func() map[string]*x509.Certificate {
		return map[string]*x509.Certificate{"cluster_ca": ca.Cert, "node": node, "none": nil}
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	if n := testutil.CollectAndCount(col); n != 4 {
		t.Errorf("series = %d, want 4: two per certificate (a nil certificate is left out)", n)
	}
	expiry := func(name string) float64 {
		t.Helper()
		return metricstest.Value(t, reg, "corpus_certificate_expiry_seconds", "certificate", name, "component", "agent")
	}
	expiresAt := func(name string) float64 {
		t.Helper()
		return metricstest.Value(t, reg, "corpus_certificate_expiry_timestamp_seconds", "certificate", name, "component", "agent")
	}
	if got := expiry("node"); got < 3500 || got > 3600 {
		t.Errorf("node expiry = %v s, want about an hour", got)
	}
	if got, want := expiresAt("node"), float64(node.NotAfter.Unix()); got != want {
		t.Errorf("node expiry timestamp = %v, want %v (its NotAfter)", got, want)
	}
	if got := expiry("cluster_ca"); got < 9*365*86400 {
		t.Errorf("cluster_ca expiry = %v s, want about ten years", got)
	}
	if got, want := expiresAt("cluster_ca"), float64(ca.Cert.NotAfter.Unix()); got != want {
		t.Errorf("cluster_ca expiry timestamp = %v, want %v", got, want)
	}
	before := expiresAt("node")
	node = issue(3 * time.Hour)
	if got := expiry("node"); got < 3*3600-100 {
		t.Errorf("node expiry after renewal = %v s, want about three hours", got)
	}
	if got := expiresAt("node"); got < before+2*3600-100 {
		t.Errorf("node expiry timestamp after renewal = %v, want about two hours past %v", got, before)
	}
}
