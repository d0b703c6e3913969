package statedb

import (
	"slices"

	corpusv1 "corpus/proto/corpus/v1"
)

// Acme returns the cluster's ACME configuration, or nil.
func (v *Snap) Acme() *corpusv1.AcmeConfig {
	ch, raw, err := v.txn.FirstWatch(TableMeta, "id", MetaAcme)
	if err != nil {
		return nil
	}
	v.ws.Add(ch)
	if raw == nil {
		return nil
	}
	return raw.(*Meta).Value.(*corpusv1.AcmeConfig)
}

// Certificate returns the certificate of a domain, or nil.
func (v *Snap) Certificate(domain string) *corpusv1.Certificate {
	return first[*corpusv1.Certificate](v, TableCertificates, "id", domain)
}

// Certificates returns every certificate sorted by domain.
func (v *Snap) Certificates() []*corpusv1.Certificate {
	return all[*corpusv1.Certificate](v, TableCertificates, "id")
}

// HTTPSDomains returns the domains of http routes that ask for HTTPS,
// sorted.
func (v *Snap) HTTPSDomains() []string {
	var out []string
	for _, r := range v.Routes() {
		if r.Is(corpusv1.RouteHTTP) && r.Https {
			out = append(out, r.Domain)
		}
	}
	slices.Sort(out)
	return out
}
