package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
)

// HTTPS with certificates the cluster orders (ACME): the agent hands the
// proxy, with its routes, each https domain's certificate and key, the
// certificate of a tls-alpn-01 challenge in progress and the answers of
// http-01 challenges. They change with the table, atomically, like
// routes. Certificates given as files (Config.Certs) serve the names no
// route's certificate covers.

// acmeTLSProto is the ALPN protocol of tls-alpn-01 (RFC 8737).
const acmeTLSProto = "acme-tls/1"

// hstsValue is the Strict-Transport-Security of routes that ask for it:
// a year, as the HSTS preload list requires.
const hstsValue = "max-age=31536000"

// TLSDomain is what HTTPS serves for one domain.
type TLSDomain struct {
	// CertPEM (the leaf then its intermediates) and KeyPEM are the
	// domain's certificate; empty before it has one.
	CertPEM string `json:"cert,omitempty"`
	KeyPEM  string `json:"key,omitempty"`
	// OCSP is the CA's OCSP response for the leaf, stapled.
	OCSP []byte `json:"ocsp,omitempty"`
	// ALPNCertPEM and ALPNKeyPEM answer a tls-alpn-01 challenge.
	ALPNCertPEM string `json:"alpn_cert,omitempty"`
	ALPNKeyPEM  string `json:"alpn_key,omitempty"`
}

// WithoutKeys returns r without its TLS material (what may be written to
// disk: keys live only in memory and in the handover to a successor).
func (r Routes) WithoutKeys() Routes {
	r = r.clone()
	r.TLS = nil
	return r
}

// tlsTable is the compiled TLS material of a routing table.
type tlsTable struct {
	certs      map[string]*tls.Certificate // by domain
	alpn       map[string]*tls.Certificate // tls-alpn-01 challenge certificates
	challenges map[string]string           // http-01 token -> key authorization
	secure     map[string]HTTPRoute        // http routes with HTTPS on
}

// compileTLS parses r's TLS material; r was validated.
func compileTLS(r Routes) (*tlsTable, error) {
	t := &tlsTable{certs: map[string]*tls.Certificate{}, alpn: map[string]*tls.Certificate{},
		challenges: maps.Clone(r.Challenges), secure: map[string]HTTPRoute{}}
	for domain, d := range r.TLS {
		if d.CertPEM != "" {
			c, err := parsePair(domain, d.CertPEM, d.KeyPEM)
			if err != nil {
				return nil, err
			}
			c.OCSPStaple = d.OCSP
			t.certs[domain] = c
		}
		if d.ALPNCertPEM != "" {
			c, err := parsePair(domain, d.ALPNCertPEM, d.ALPNKeyPEM)
			if err != nil {
				return nil, err
			}
			t.alpn[domain] = c
		}
	}
	for host, hr := range r.HTTP {
		if hr.HTTPS {
			t.secure[host] = hr
		}
	}
	return t, nil
}

func parsePair(domain, certPEM, keyPEM string) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		return nil, fmt.Errorf("tls of %q: %w: %w", domain, ErrCertificate, err)
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls of %q: %w: %w", domain, ErrCertificate, err)
		}
	}
	return &c, nil
}

// getCertificate picks the certificate of a TLS handshake: a tls-alpn-01
// challenge's when the client asks for acme-tls/1 only, else the
// domain's, else one of the configured files'.
func (p *Proxy) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := matchHost(hello.ServerName)
	t := p.table.Load().tls
	if slices.Equal(hello.SupportedProtos, []string{acmeTLSProto}) {
		if c := t.alpn[name]; c != nil {
			return c, nil
		}
		return nil, fmt.Errorf("no tls-alpn-01 challenge in progress for %q", name)
	}
	if c := t.certs[name]; c != nil {
		return c, nil
	}
	if p.static != nil {
		return p.static.get(hello)
	}
	return nil, fmt.Errorf("no certificate for %q", name)
}

// answerChallenge answers an http-01 challenge the table knows of.
func (p *Proxy) answerChallenge(w http.ResponseWriter, r *http.Request, t *table) bool {
	if len(t.tls.challenges) == 0 || !strings.HasPrefix(r.URL.Path, acmeChallengePrefix) {
		return false
	}
	ka, ok := t.tls.challenges[strings.TrimPrefix(r.URL.Path, acmeChallengePrefix)]
	if !ok {
		return false
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Write([]byte(ka))
	return true
}

// secure applies an https route's settings: plain HTTP is redirected
// when asked (once the domain has a certificate to serve), HTTPS answers
// carry HSTS when asked. It reports whether it answered.
func (p *Proxy) secure(w http.ResponseWriter, r *http.Request, t *table, host string) bool {
	hr, ok := t.tls.secure[host]
	if !ok {
		return false
	}
	if r.TLS != nil {
		if hr.HSTS {
			w.Header().Set("Strict-Transport-Security", hstsValue)
		}
		return false
	}
	if !hr.RedirectHTTPS || t.tls.certs[host] == nil || p.httpsLn == nil {
		return false
	}
	target := "https://" + host
	if _, port, err := net.SplitHostPort(p.httpsLn.Addr().String()); err == nil && port != "443" {
		target += ":" + port
	}
	http.Redirect(w, r, target+r.URL.RequestURI(), http.StatusPermanentRedirect)
	return true
}

// validTLS checks the TLS material of r.
func (r Routes) validTLS() []error {
	var errs []error
	for _, domain := range slices.Sorted(maps.Keys(r.TLS)) {
		d := r.TLS[domain]
		if err := validHost(domain); err != nil {
			errs = append(errs, fmt.Errorf("tls of %q: %w", domain, err))
			continue
		}
		if d.CertPEM != "" {
			if _, err := parsePair(domain, d.CertPEM, d.KeyPEM); err != nil {
				errs = append(errs, err)
			}
		}
		if d.ALPNCertPEM != "" {
			if _, err := parsePair(domain, d.ALPNCertPEM, d.ALPNKeyPEM); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for host, hr := range r.HTTP {
		if (hr.RedirectHTTPS || hr.HSTS) && !hr.HTTPS {
			errs = append(errs, fmt.Errorf("http route %q: %w: a redirect to HTTPS or HSTS without HTTPS", host, ErrInvalidHost))
		}
	}
	for token := range r.Challenges {
		if token == "" || strings.ContainsAny(token, "/?#") {
			errs = append(errs, errors.New("an http-01 challenge token with a path character"))
		}
	}
	return errs
}
