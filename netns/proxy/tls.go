package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"

	"corpus/internal/names"
)

// certSet picks a certificate by the client's SNI name.
type certSet struct {
	byName map[string]*tls.Certificate // exact names and "*.parent" wildcards
	first  *tls.Certificate
	all    []*x509.Certificate // leaves, in the order given
}

// loadCerts reads every PEM pair; errors wrap ErrCertificate.
func loadCerts(files []CertFiles) (*certSet, error) {
	s := &certSet{byName: map[string]*tls.Certificate{}}
	for _, f := range files {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading %s and %s: %w: %w", f.CertFile, f.KeyFile, ErrCertificate, err)
		}
		if cert.Leaf == nil {
			if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
				return nil, fmt.Errorf("parsing %s: %w: %w", f.CertFile, ErrCertificate, err)
			}
		}
		if len(cert.Leaf.DNSNames) == 0 {
			return nil, fmt.Errorf("loading %s: %w: no DNS names (subjectAltName)", f.CertFile, ErrCertificate)
		}
		c := &cert
		s.all = append(s.all, cert.Leaf)
		if s.first == nil {
			s.first = c
		}
		for _, name := range cert.Leaf.DNSNames {
			name = names.NormalizeDomain(name)
			if _, dup := s.byName[name]; !dup {
				s.byName[name] = c
			}
		}
	}
	return s, nil
}

// get serves tls.Config.GetCertificate: the exact name, then a wildcard of
// its parent, then the first certificate.
func (s *certSet) get(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := matchHost(hello.ServerName)
	if c, ok := s.byName[name]; ok {
		return c, nil
	}
	if i := strings.IndexByte(name, '.'); i > 0 {
		if c, ok := s.byName["*"+name[i:]]; ok {
			return c, nil
		}
	}
	return s.first, nil
}

// LoadLeaves loads certificate files as New would and returns their
// leaves, in order (for callers that report on a proxy's certificates
// without running it).
func LoadLeaves(files []CertFiles) ([]*x509.Certificate, error) {
	s, err := loadCerts(files)
	if err != nil {
		return nil, err
	}
	return s.all, nil
}
