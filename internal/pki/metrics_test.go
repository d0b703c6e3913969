package pki_test

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"corpus/internal/pki"
)

// TestExpiryCollector: each named certificate's remaining life is
// exported, and a renewal shows at the next scrape.
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
	if n := testutil.CollectAndCount(col); n != 2 {
		t.Errorf("series = %d, want 2 (a nil certificate is left out)", n)
	}
	expiry := func(name string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mfs[0].Metric {
			if m.Label[0].GetValue() == name && m.Label[1].GetValue() == "agent" {
				return m.GetGauge().GetValue()
			}
		}
		t.Fatalf("no series for %s", name)
		return 0
	}
	if got := expiry("node"); got < 3500 || got > 3600 {
		t.Errorf("node expiry = %v s, want about an hour", got)
	}
	if got := expiry("cluster_ca"); got < 9*365*86400 {
		t.Errorf("cluster_ca expiry = %v s, want about ten years", got)
	}
	node = issue(3 * time.Hour)
	if got := expiry("node"); got < 3*3600-100 {
		t.Errorf("node expiry after renewal = %v s, want about three hours", got)
	}
}
