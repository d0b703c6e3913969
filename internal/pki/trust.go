package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
)

// Trust is the set of CAs a component trusts, which a rotation of the
// cluster CA changes while the component runs: configurations made from
// it (ServerConfig, ClientConfig) check every new handshake against the
// set of the moment; established connections go on.
type Trust struct {
	cur atomic.Pointer[trustSet]
}

type trustSet struct {
	pool  *x509.CertPool
	certs []*x509.Certificate
	pem   []byte
}

// NewTrust returns a Trust of cas.
func NewTrust(cas ...*x509.Certificate) *Trust {
	t := &Trust{}
	t.Set(cas)
	return t
}

// poolTrust is a Trust of a fixed pool (its certificates unknown).
func poolTrust(pool *x509.CertPool) *Trust {
	t := &Trust{}
	t.cur.Store(&trustSet{pool: pool})
	return t
}

// Set replaces the trusted CAs.
func (t *Trust) Set(cas []*x509.Certificate) {
	s := &trustSet{pool: x509.NewCertPool(), certs: slices.Clone(cas)}
	for _, c := range cas {
		s.pool.AddCert(c)
		s.pem = append(s.pem, pemBlock("CERTIFICATE", c.Raw)...)
	}
	t.cur.Store(s)
}

// Pool is the trusted CAs as a pool.
func (t *Trust) Pool() *x509.CertPool { return t.cur.Load().pool }

// Certs are the trusted CAs.
func (t *Trust) Certs() []*x509.Certificate { return t.cur.Load().certs }

// PEM is the trusted CAs, PEM, in the order given.
func (t *Trust) PEM() []byte { return t.cur.Load().pem }

// Pins are the pins of the trusted CAs.
func (t *Trust) Pins() []string { return Pins(t.Certs()) }

// Pins returns the pins of cas.
func Pins(cas []*x509.Certificate) []string {
	out := make([]string, len(cas))
	for i, c := range cas {
		out[i] = Pin(c)
	}
	return out
}

// ParseCerts parses every certificate of a PEM bundle (at least one).
func ParseCerts(bundle []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := bundle; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("a PEM %s among certificates", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("not a PEM CERTIFICATE")
	}
	return out, nil
}

// IssuerOf returns the one of cas whose key signed c, nil if none did.
func IssuerOf(c *x509.Certificate, cas []*x509.Certificate) *x509.Certificate {
	for _, ca := range cas {
		if bytes.Equal(c.RawIssuer, ca.RawSubject) && c.CheckSignatureFrom(ca) == nil {
			return ca
		}
	}
	return nil
}

// serverConfig is ServerConfig with the client CAs of trust: a
// handshake gets a configuration with the pool of the moment (one made
// per pool, kept until the next change).
func serverConfig(trust *Trust, keys *Keys, requireClient bool) *tls.Config {
	auth := tls.VerifyClientCertIfGiven
	if requireClient {
		auth = tls.RequireAndVerifyClientCert
	}
	base := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		Time:           now,
		ClientAuth:     auth,
		ClientCAs:      trust.Pool(),
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return keys.Get(), nil },
	}
	type made struct {
		pool *x509.CertPool
		cfg  *tls.Config
	}
	var last atomic.Pointer[made]
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pool := trust.Pool()
		if m := last.Load(); m != nil && m.pool == pool {
			return m.cfg, nil
		}
		// Cloned here, not before: a caller may set more fields (a
		// VerifyConnection) on base after this returns.
		c := base.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = pool
		last.Store(&made{pool: pool, cfg: c})
		return c, nil
	}
	return base
}

// clientConfig is ClientConfig against trust: the server's chain is
// verified by hand against the pool of the moment (Go's own check reads
// RootCAs, fixed when the configuration is made).
func clientConfig(trust *Trust, keys *Keys, role, id string) *tls.Config {
	name := ServerName
	if role == RoleNode {
		name = NodeServerName
	}
	c := &tls.Config{
		MinVersion: tls.VersionTLS13,
		Time:       now,
		ServerName: name,
		// Verified in VerifyConnection, against trust.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("peer sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			chains, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots: trust.Pool(), Intermediates: inter, DNSName: name,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, CurrentTime: now(),
			})
			if err != nil {
				return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
			}
			return expectPeer(tls.ConnectionState{VerifiedChains: chains}, role, id)
		},
	}
	if keys != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return keys.Get(), nil }
	}
	return c
}

// PinOf is the pin of the first certificate of a PEM bundle.
func PinOf(certPEM []byte) (string, error) {
	c, err := ParseCert(certPEM)
	if err != nil {
		return "", err
	}
	return Pin(c), nil
}

// TrustedKeyPair is KeyPair presenting the certificate with the one of
// cas that issued it, which must be one of them.
func TrustedKeyPair(certPEM, keyPEM []byte, cas []*x509.Certificate) (*tls.Certificate, error) {
	leaf, err := ParseCert(certPEM)
	if err != nil {
		return nil, err
	}
	issuer := IssuerOf(leaf, cas)
	if issuer == nil {
		return nil, errors.New("the certificate is from none of the CAs trusted")
	}
	return KeyPair(certPEM, keyPEM, pemBlock("CERTIFICATE", issuer.Raw))
}

// FindCA is the one of cas whose certificate is certPEM's (by pin), nil
// if none is or certPEM does not parse.
func FindCA(cas []*CA, certPEM string) *CA {
	pin, err := PinOf([]byte(certPEM))
	if err != nil {
		return nil
	}
	for _, ca := range cas {
		if ca.Pin() == pin {
			return ca
		}
	}
	return nil
}
