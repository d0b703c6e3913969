// Package pki is the cluster's certificate authority and the mutual TLS
// every corpus component speaks to every other.
//
// The cluster CA is created by the first coordinator (or given to it as
// files) and signs short-lived certificates: coordinators issue their own,
// node agents get theirs by sending a certificate signing request with a
// one-time join token, and renew them before they expire. A certificate
// names its holder in a URI SAN, corpus://ROLE/ID, so a peer's role and
// identity come from the verified chain, never from what the peer says.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"slices"
	"time"

	"corpus/internal/clock"
	"corpus/internal/seal"
)

// Roles a certificate may carry.
const (
	RoleCoordinator = "coordinator"
	RoleNode        = "node"
)

// ServerName is the name every coordinator certificate carries and every
// client verifies, whatever address it dialled: replicas move, the CA and
// the role are what identify them.
const ServerName = "coordinator.corpus"

// NodeServerName is the name agents' certificates carry for their own API.
const NodeServerName = "node.corpus"

// CA is the cluster's certificate authority.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	// Clock dates the certificates it issues (nil: clock.System).
	Clock clock.Clock
	key   crypto.Signer
}

// NewCA creates a self-signed ECDSA P-256 CA valid for ten years.
func NewCA(clusterName string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "corpus cluster CA " + clusterName, Organization: []string{"corpus"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", keyDER), nil
}

// LoadCA parses a CA certificate and its key, checking they belong together.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("ca certificate: not a CA (basic constraints)")
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	if !publicKeyEqual(cert.PublicKey, key.Public()) {
		return nil, errors.New("ca key does not match the ca certificate")
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: key}, nil
}

// Pool returns a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Pin is the CA's fingerprint (hex SHA-256 of its public key info), the
// value join tokens carry so a new host can trust the CA it has never seen.
func (ca *CA) Pin() string { return Pin(ca.Cert) }

// Pin returns the hex SHA-256 of a certificate's public key info.
func Pin(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// Request is what a certificate is issued for.
type Request struct {
	Role string
	ID   string
	// DNSNames and IPs are extra subject alternative names.
	DNSNames []string
	IPs      []net.IP
	TTL      time.Duration
}

// Issued is a signed certificate.
type Issued struct {
	CertPEM  []byte
	Serial   string
	NotAfter time.Time
}

// Sign issues a certificate for the public key of a CSR. Whatever names
// the CSR asks for are ignored: the role, identity and names come from r,
// which the caller decided from an authenticated request.
func (ca *CA) Sign(csrPEM []byte, r Request) (Issued, error) {
	b, _ := pem.Decode(csrPEM)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return Issued{}, errors.New("certificate request: not a PEM CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return Issued{}, fmt.Errorf("certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return Issued{}, fmt.Errorf("certificate request: %w", err)
	}
	switch k := csr.PublicKey.(type) {
	case *ecdsa.PublicKey:
		if k.Curve.Params().BitSize < 256 {
			return Issued{}, errors.New("certificate request: ECDSA keys must be P-256 or larger")
		}
	default:
		return Issued{}, fmt.Errorf("certificate request: key type %T not accepted (use ECDSA P-256)", csr.PublicKey)
	}
	return ca.issue(csr.PublicKey, r)
}

// Backdate is how long before its issue a certificate is valid from, as
// public CAs date theirs: a signer whose clock runs up to that much ahead
// of its peers' still issues certificates they accept at once. Renewal
// counts a certificate's life from its issue (IssuedAt), not from then.
const Backdate = time.Hour

func (ca *CA) issue(pub crypto.PublicKey, r Request) (Issued, error) {
	if r.Role != RoleCoordinator && r.Role != RoleNode {
		return Issued{}, fmt.Errorf("role %q: not a certificate role", r.Role)
	}
	if r.ID == "" || r.TTL <= 0 {
		return Issued{}, errors.New("certificate needs an identity and a lifetime")
	}
	now := clock.Or(ca.Clock).Now()
	notAfter := now.Add(r.TTL)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	sn := serial()
	names := append([]string{ServerName}, r.DNSNames...)
	if r.Role == RoleNode {
		names = append([]string{NodeServerName}, r.DNSNames...)
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: r.Role + " " + r.ID, Organization: []string{"corpus"}, OrganizationalUnit: []string{r.Role}},
		NotBefore:    now.Add(-Backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     names,
		IPAddresses:  r.IPs,
		URIs:         []*url.URL{IdentityURI(r.Role, r.ID)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
	if err != nil {
		return Issued{}, err
	}
	return Issued{CertPEM: pemBlock("CERTIFICATE", der), Serial: sn.Text(16), NotAfter: notAfter}, nil
}

// IssueKeyPair makes a key and a certificate for it in one step (a
// coordinator issuing its own).
func (ca *CA) IssueKeyPair(r Request) (certPEM, keyPEM []byte, iss Issued, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, Issued{}, err
	}
	iss, err = ca.issue(key.Public(), r)
	if err != nil {
		return nil, nil, Issued{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, Issued{}, err
	}
	return iss.CertPEM, pemBlock("PRIVATE KEY", keyDER), iss, nil
}

// Covers says whether c names every one of ips and dnsNames among its
// subject alternative names (a certificate issued before they were
// asked for does not).
func Covers(c *x509.Certificate, ips []net.IP, dnsNames []string) bool {
	for _, ip := range ips {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			return false
		}
	}
	for _, n := range dnsNames {
		if !slices.Contains(c.DNSNames, n) {
			return false
		}
	}
	return true
}

// IdentityURI is the URI SAN naming a certificate's holder.
func IdentityURI(role, id string) *url.URL {
	return &url.URL{Scheme: "corpus", Host: role, Path: "/" + id}
}

// Identity is who a verified certificate names.
type Identity struct {
	Role   string
	ID     string
	Serial string
	// NotAfter is when the certificate expires.
	NotAfter time.Time
}

// IdentityOf reads the role and identity of a certificate.
func IdentityOf(c *x509.Certificate) (Identity, bool) {
	for _, u := range c.URIs {
		if u.Scheme == "corpus" && (u.Host == RoleCoordinator || u.Host == RoleNode) && len(u.Path) > 1 {
			return Identity{Role: u.Host, ID: u.Path[1:], Serial: c.SerialNumber.Text(16), NotAfter: c.NotAfter}, true
		}
	}
	return Identity{}, false
}

// NewKeyAndCSR makes a P-256 key and a certificate request for it.
func NewKeyAndCSR(commonName string) (keyPEM, csrPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: commonName}}, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("PRIVATE KEY", keyDER), pemBlock("CERTIFICATE REQUEST", der), nil
}

// ParseCert parses the first certificate of a PEM bundle.
func ParseCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM CERTIFICATE")
	}
	return x509.ParseCertificate(b.Bytes)
}

// ParseKey parses a PKCS#8 (or SEC 1 EC) private key.
func ParseKey(keyPEM []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, errors.New("not a PEM private key")
	}
	if k, err := x509.ParsePKCS8PrivateKey(b.Bytes); err == nil {
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("key type %T cannot sign", k)
		}
		return s, nil
	}
	return x509.ParseECPrivateKey(b.Bytes)
}

// KeyPair parses a certificate and its key into a TLS certificate that
// also sends the CA, so a peer pinning the CA can check the chain.
func KeyPair(certPEM, keyPEM, caPEM []byte) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(append(append([]byte{}, certPEM...), caPEM...), keyPEM)
	if err != nil {
		return nil, err
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

func publicKeyEqual(a, b crypto.PublicKey) bool {
	ka, err1 := x509.MarshalPKIXPublicKey(a)
	kb, err2 := x509.MarshalPKIXPublicKey(b)
	return err1 == nil && err2 == nil && bytes.Equal(ka, kb)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err)
	}
	return n.Add(n, big.NewInt(1))
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// SealKEK is the key-encryption key of the cluster's sealed values
// (internal/seal), derived from the CA's private key: every replica
// holding the CA derives the same one, and nothing else can.
func (ca *CA) SealKEK() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	return seal.KEK(der)
}

// KeyPEM is the CA's private key, PKCS #8 PEM.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	return pemBlock("PRIVATE KEY", der), nil
}
