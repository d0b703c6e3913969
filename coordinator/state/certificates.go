package state

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// HTTPS: the cluster's ACME account (a singleton) and the certificate of
// every https domain, keys sealed with the cluster keyring like config
// values. Only the leader's orderer writes certificates, each write
// conditional on the index it read, so a deposed leader's late result
// never overwrites its successor's.

// Certificate states.
const (
	CertPending = "pending"
	CertValid   = "valid"
	CertFailed  = "failed"
)

// ACME challenge types.
const (
	ChallengeHTTP01    = corpusv1.ChallengeHTTP01
	ChallengeTLSALPN01 = corpusv1.ChallengeTLSALPN01
)

// CertificateKeyPlace is what a certificate's key is sealed for.
func CertificateKeyPlace(domain string) string { return "certificate/" + domain }

// ChallengeKeyPlace is what a tls-alpn-01 challenge certificate's key is
// sealed for.
func ChallengeKeyPlace(domain string) string { return "challenge/" + domain }

// AcmeKeyPlace is what the ACME account key is sealed for.
const AcmeKeyPlace = "acme/account"

// ValidChallenge says whether t is a challenge type corpus answers.
func ValidChallenge(t string) bool { return t == ChallengeHTTP01 || t == ChallengeTLSALPN01 }

func (a *applier) setAcmeConfig(c *corpusv1.SetAcmeConfig) error {
	cur, _ := a.get(statedb.TableMeta, "id", statedb.MetaAcme).(*statedb.Meta)
	var idx uint64
	if cur != nil {
		idx = cur.Value.(*corpusv1.AcmeConfig).ModifyIndex
	}
	if c.ExpectModifyIndex != 0 && c.ExpectModifyIndex != idx {
		return fmt.Errorf("acme config changed meanwhile (index %d, not %d): %w", idx, c.ExpectModifyIndex, ErrStale)
	}
	if c.Config.GetDirectoryUrl() == "" {
		if cur != nil {
			a.del(statedb.TableMeta, cur)
		}
		return nil
	}
	for _, t := range c.Config.Challenges {
		if !ValidChallenge(t) {
			return fmt.Errorf("acme challenge %q (want http-01 or tls-alpn-01): %w", t, ErrInvalid)
		}
	}
	if len(c.Config.AccountKey) > 0 {
		if err := a.checkSealed("acme account key", map[string][]byte{"key": c.Config.AccountKey}); err != nil {
			return err
		}
	}
	cfg := proto.Clone(c.Config).(*corpusv1.AcmeConfig)
	cfg.ModifyIndex = a.index
	a.put(statedb.TableMeta, &statedb.Meta{Key: statedb.MetaAcme, Value: cfg})
	return nil
}

func (a *applier) putCertificate(c *corpusv1.PutCertificate) error {
	in := c.Certificate
	if in == nil || in.Domain == "" {
		return fmt.Errorf("certificate without a domain: %w", ErrInvalid)
	}
	switch in.State {
	case CertPending, CertValid, CertFailed:
	default:
		return fmt.Errorf("certificate state %q: %w", in.State, ErrInvalid)
	}
	cur, _ := a.get(statedb.TableCertificates, "id", in.Domain).(*corpusv1.Certificate)
	var idx uint64
	if cur != nil {
		idx = cur.ModifyIndex
	}
	if c.ExpectModifyIndex != idx {
		return fmt.Errorf("certificate of %s changed meanwhile (index %d, not %d): %w", in.Domain, idx, c.ExpectModifyIndex, ErrStale)
	}
	sealed := map[string][]byte{}
	if len(in.Key) > 0 {
		sealed["key"] = in.Key
	}
	if k := in.Challenge.GetAlpnKey(); len(k) > 0 {
		sealed["challenge key"] = k
	}
	if err := a.checkSealed("certificate of "+in.Domain, sealed); err != nil {
		return err
	}
	crt := proto.Clone(in).(*corpusv1.Certificate)
	crt.CreateIndex, crt.ModifyIndex = a.index, a.index
	if cur != nil {
		crt.CreateIndex = cur.CreateIndex
	}
	a.put(statedb.TableCertificates, crt)
	return nil
}

func (a *applier) deleteCertificate(c *corpusv1.DeleteCertificate) error {
	cur := a.get(statedb.TableCertificates, "id", c.Domain)
	if cur == nil {
		return nil
	}
	a.del(statedb.TableCertificates, cur)
	return nil
}

// setRouteTLS changes how an http route serves HTTPS.
func (a *applier) setRouteTLS(c *corpusv1.SetRouteTls) error {
	raw := a.get(statedb.TableRoutes, "id", c.Id)
	if raw == nil {
		return fmt.Errorf("route %s: %w", c.Id, ErrNotFound)
	}
	r := proto.Clone(raw.(*corpusv1.Route)).(*corpusv1.Route)
	if !r.Is(corpusv1.RouteHTTP) {
		return fmt.Errorf("route %s is a %s route; only http routes serve HTTPS: %w", c.Id, r.Kind, ErrInvalid)
	}
	if (c.RedirectHttps || c.Hsts) && !c.Https {
		return fmt.Errorf("a redirect to HTTPS or HSTS needs HTTPS: %w", ErrInvalid)
	}
	r.Https, r.RedirectHttps, r.Hsts = c.Https, c.RedirectHttps, c.Hsts
	r.ModifyIndex = a.index
	a.put(statedb.TableRoutes, r)
	return nil
}

// certificateSealed returns a certificate's sealed values by the names
// a keyring rotation reseals them under.
func certificateSealed(crt *corpusv1.Certificate) map[string][]byte {
	out := map[string][]byte{}
	if len(crt.Key) > 0 {
		out["key"] = crt.Key
	}
	if k := crt.Challenge.GetAlpnKey(); len(k) > 0 {
		out["challenge"] = k
	}
	return out
}

// resealTLS installs a certificate's or the ACME account's values sealed
// anew by a keyring rotation.
func (a *applier) resealTLS(r *corpusv1.ResealedConfig) error {
	if r.Acme {
		cur, _ := a.get(statedb.TableMeta, "id", statedb.MetaAcme).(*statedb.Meta)
		if cur == nil || len(r.Config["key"]) == 0 {
			return fmt.Errorf("resealing the acme account: it changed meanwhile: %w", ErrStale)
		}
		cfg := proto.Clone(cur.Value.(*corpusv1.AcmeConfig)).(*corpusv1.AcmeConfig)
		cfg.AccountKey = r.Config["key"]
		cfg.ModifyIndex = a.index
		a.put(statedb.TableMeta, &statedb.Meta{Key: statedb.MetaAcme, Value: cfg})
		return nil
	}
	raw, _ := a.get(statedb.TableCertificates, "id", r.Certificate).(*corpusv1.Certificate)
	if raw == nil || !slices.Equal(sortedKeys(certificateSealed(raw)), sortedKeys(r.Config)) {
		return fmt.Errorf("resealing the certificate of %s: it changed meanwhile: %w", r.Certificate, ErrStale)
	}
	crt := proto.Clone(raw).(*corpusv1.Certificate)
	if k, ok := r.Config["key"]; ok {
		crt.Key = k
	}
	if k, ok := r.Config["challenge"]; ok {
		crt.Challenge.AlpnKey = k
	}
	crt.ModifyIndex = a.index
	a.put(statedb.TableCertificates, crt)
	return nil
}
