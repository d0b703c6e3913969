package certs

import (
	"context"
	"errors"
	"testing"

	corpusv1 "corpus/proto/corpus/v1"
)

// TestMaterialFetchesChangesOnly: a domain's material is fetched when its
// record changes, kept when a fetch fails, dropped with its route; a
// failed fetch is not tried again on the next pass.
func TestMaterialFetchesChangesOnly(t *testing.T) {
	var asked [][]string
	fail := false
	c := New(func(_ context.Context, domains []string) ([]*corpusv1.TlsDomain, error) {
		asked = append(asked, domains)
		if fail {
			return nil, errors.New("coordinator away")
		}
		var out []*corpusv1.TlsDomain
		for _, d := range domains {
			out = append(out, &corpusv1.TlsDomain{Domain: d, ChainPem: "chain of " + d, KeyPem: "key", ModifyIndex: 7})
		}
		return out, nil
	})
	ctx := context.Background()
	certs := []*corpusv1.Certificate{
		{Domain: "a.test", ChainPem: "x", ModifyIndex: 7},
		{Domain: "b.test", State: "pending", ModifyIndex: 3, Challenge: &corpusv1.AcmeChallenge{Type: corpusv1.ChallengeHTTP01, Token: "tok", KeyAuthorization: "tok.ka"}},
	}
	tls, ch, err := c.Material(ctx, certs)
	if err != nil || tls["a.test"].CertPEM != "chain of a.test" || len(tls) != 1 || ch["tok"] != "tok.ka" || len(asked) != 1 || len(asked[0]) != 1 {
		t.Fatalf("first pass: %v %v %v, asked %v", tls, ch, err, asked)
	}
	if _, _, err := c.Material(ctx, certs); err != nil || len(asked) != 1 {
		t.Errorf("unchanged records fetched again: asked %v, %v", asked, err)
	}
	certs[0] = &corpusv1.Certificate{Domain: "a.test", ChainPem: "y", ModifyIndex: 9}
	fail = true
	tls, _, err = c.Material(ctx, certs)
	if err == nil || tls["a.test"].CertPEM != "chain of a.test" {
		t.Errorf("a failed fetch: %v, %v; want the error and the previous certificate kept", tls, err)
	}
	if _, _, err := c.Material(ctx, certs); err == nil || len(asked) != 2 {
		t.Errorf("fetched again right after a failure: asked %v", asked)
	}
	tls, _, _ = c.Material(ctx, nil)
	if len(tls) != 0 {
		t.Errorf("a domain no longer routed keeps its material: %v", tls)
	}
}
