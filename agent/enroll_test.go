package agent

import (
	"strings"
	"testing"
	"time"

	"corpus/agent/cache"
	"corpus/internal/clock"
	"corpus/internal/pki"
)

// TestCannotServe: an enrolled node trades a join token again only when
// its certificate cannot serve it: expired, or not of a CA the token
// names (the cluster CA rotated while the node was away).
func TestCannotServe(t *testing.T) {
	newCA := func() *pki.CA {
		certPEM, keyPEM, err := pki.NewCA("test")
		if err != nil {
			t.Fatal(err)
		}
		ca, err := pki.LoadCA(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	identity := func(ca *pki.CA, issuedAgo time.Duration) cache.Identity {
		var clk clock.Offset
		clk.Set(-issuedAgo)
		ca.Clock = &clk
		c, k, _, err := ca.IssueKeyPair(pki.Request{Role: pki.RoleNode, ID: "n1", TTL: 30 * 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return cache.Identity{NodeID: "n1", CertPEM: c, KeyPEM: k, CAPEM: ca.CertPEM}
	}
	old, next := newCA(), newCA()
	token := func(ca *pki.CA) string { return "tokid.secret." + ca.Pin() }
	for _, tc := range []struct {
		name  string
		id    cache.Identity
		token string
		want  string
	}{
		{"valid, no token", identity(old, time.Hour), "", ""},
		{"valid, its CA's token", identity(old, time.Hour), token(old), ""},
		{"expired", identity(old, 40*24*time.Hour), "", "expired"},
		{"a token of another CA", identity(old, time.Hour), token(next), "rotated"},
	} {
		a := &Agent{cfg: Config{JoinToken: tc.token}}
		got := a.cannotServe(tc.id)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: cannotServe = %q, want %q", tc.name, got, tc.want)
		}
	}
}
