package pki_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"corpus/internal/clock"
	"corpus/internal/pki"
	"corpus/internal/testrun"
)

func newCA(t *testing.T) *pki.CA {
	t.Helper()
	c, k, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestSignNamesWhatTheCASays: whatever a request asks for, the
// certificate names the role and id the signer decided, for the
// request's key.
func TestSignNamesWhatTheCASays(t *testing.T) {
	ca := newCA(t)
	keyPEM, _, err := pki.NewKeyAndCSR("node n1")
	if err != nil {
		t.Fatal(err)
	}
	key, _ := pki.ParseKey(keyPEM)
	// A request that asks to be a coordinator, in its subject and SANs.
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "coordinator c1"}, URIs: []*url.URL{pki.IdentityURI(pki.RoleCoordinator, "c1")}, DNSNames: []string{pki.ServerName},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	iss, err := ca.Sign(csr, pki.Request{Role: pki.RoleNode, ID: "abc", TTL: time.Hour})
	if err != nil {
		t.Fatalf("Sign = %v", err)
	}
	cert, err := pki.ParseCert(iss.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	id, ok := pki.IdentityOf(cert)
	if !ok || id.Role != pki.RoleNode || id.ID != "abc" || id.Serial != iss.Serial {
		t.Errorf("IdentityOf = %+v, %v; want node abc, serial %s", id, ok, iss.Serial)
	}
	for _, n := range cert.DNSNames {
		if n == pki.ServerName {
			t.Errorf("a node certificate carries the coordinators' name %s", n)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the certificate does not verify with its CA: %v", err)
	}
	if got := time.Until(cert.NotAfter); got > time.Hour || got < 59*time.Minute {
		t.Errorf("lifetime %s, want an hour", got)
	}
	if _, err := pki.KeyPair(iss.CertPEM, keyPEM, ca.CertPEM); err != nil {
		t.Errorf("the certificate does not match the request's key: %v", err)
	}
}

func TestSignRefuses(t *testing.T) {
	ca := newCA(t)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, rsaKey)
	rsaCSR := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	_, good, _ := pki.NewKeyAndCSR("x")
	tampered := append([]byte{}, good...)
	tampered[len(tampered)/2] ^= 1
	for _, tc := range []struct {
		name string
		csr  []byte
		r    pki.Request
	}{
		{"not PEM", []byte("hello"), pki.Request{Role: pki.RoleNode, ID: "a", TTL: time.Hour}},
		{"a certificate, not a request", ca.CertPEM, pki.Request{Role: pki.RoleNode, ID: "a", TTL: time.Hour}},
		{"RSA key", rsaCSR, pki.Request{Role: pki.RoleNode, ID: "a", TTL: time.Hour}},
		{"tampered", tampered, pki.Request{Role: pki.RoleNode, ID: "a", TTL: time.Hour}},
		{"unknown role", good, pki.Request{Role: "root", ID: "a", TTL: time.Hour}},
		{"no id", good, pki.Request{Role: pki.RoleNode, TTL: time.Hour}},
		{"no lifetime", good, pki.Request{Role: pki.RoleNode, ID: "a"}},
	} {
		if _, err := ca.Sign(tc.csr, tc.r); err == nil {
			t.Errorf("Sign(%s) = nil, want refused", tc.name)
		}
	}
}

func TestLoadCARefusesAMismatchedKey(t *testing.T) {
	c1, _, _ := pki.NewCA("one")
	_, k2, _ := pki.NewCA("two")
	if _, err := pki.LoadCA(c1, k2); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("LoadCA(cert of one, key of two) = %v, want a mismatch", err)
	}
}

func TestRenewDue(t *testing.T) {
	ca := newCA(t)
	// Certificates are valid from Backdate before their issue; their
	// life counts from the issue, also when it is shorter than that.
	for _, ttl := range []time.Duration{30 * time.Second, 3 * time.Hour, 30 * 24 * time.Hour} {
		issued := time.Now()
		c, k, _, err := ca.IssueKeyPair(pki.Request{Role: pki.RoleCoordinator, ID: "c1", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		kp, _ := pki.KeyPair(c, k, ca.CertPEM)
		keys := pki.NewKeys(kp)
		if got := pki.Lifetime(kp.Leaf); got < ttl-2*time.Second || got > ttl+time.Second {
			t.Errorf("ttl %s: Lifetime = %s", ttl, got)
		}
		if keys.RenewDue(issued.Add(ttl / 2)) {
			t.Errorf("ttl %s: RenewDue at half its life = true", ttl)
		}
		if !keys.RenewDue(issued.Add(ttl*2/3 + 2*time.Second)) {
			t.Errorf("ttl %s: RenewDue past two thirds of its life = false", ttl)
		}
	}
}

// TestPinnedAndMutualTLS: a host pinning the CA trusts a coordinator of
// it and no other; a server requiring client certificates refuses one of
// another CA; roles are checked on both sides.
func TestPinnedAndMutualTLS(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	keysOf := func(ca *pki.CA, role, id string) *pki.Keys {
		c, k, _, err := ca.IssueKeyPair(pki.Request{Role: role, ID: id, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		kp, err := pki.KeyPair(c, k, ca.CertPEM)
		if err != nil {
			t.Fatal(err)
		}
		return pki.NewKeys(kp)
	}
	serve := func(cfg *tls.Config) string {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					c.(*tls.Conn).Handshake()
					c.Write([]byte("ok"))
					c.Close()
				}()
			}
		}()
		return ln.Addr().String()
	}
	talk := func(addr string, cfg *tls.Config) error {
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(testrun.D(5 * time.Second)))
		b := make([]byte, 2)
		_, err = c.Read(b) // a refused client certificate shows here in TLS 1.3
		if err == nil && string(b) != "ok" {
			err = errors.New("no answer")
		}
		return err
	}
	coord := serve(pki.ServerConfig(ca.Pool(), keysOf(ca, pki.RoleCoordinator, "c1"), true))
	impostor := serve(pki.ServerConfig(other.Pool(), keysOf(other, pki.RoleCoordinator, "c1"), true))
	nodeAsServer := serve(pki.ServerConfig(ca.Pool(), keysOf(ca, pki.RoleNode, "n1"), true))

	mine := keysOf(ca, pki.RoleNode, "n2")
	for _, tc := range []struct {
		name string
		addr string
		cfg  *tls.Config
		ok   bool
	}{
		{"node to its coordinator", coord, pki.ClientConfig(ca.Pool(), mine, pki.RoleCoordinator, ""), true},
		{"pinned host to the coordinator", coord, pki.PinnedConfig(ca.Pin()), false}, // no client certificate: refused by this server
		{"pinned host to an impostor", impostor, pki.PinnedConfig(ca.Pin()), false},
		{"node to an impostor", impostor, pki.ClientConfig(ca.Pool(), mine, pki.RoleCoordinator, ""), false},
		{"node with another CA's certificate", coord, pki.ClientConfig(ca.Pool(), keysOf(other, pki.RoleNode, "n2"), pki.RoleCoordinator, ""), false},
		{"a node posing as coordinator", nodeAsServer, pki.ClientConfig(ca.Pool(), mine, pki.RoleCoordinator, ""), false},
		{"coordinator to the wrong node", nodeAsServer, pki.ClientConfig(ca.Pool(), keysOf(ca, pki.RoleCoordinator, "c1"), pki.RoleNode, "n9"), false},
		{"coordinator to the right node", nodeAsServer, pki.ClientConfig(ca.Pool(), keysOf(ca, pki.RoleCoordinator, "c1"), pki.RoleNode, "n1"), true},
	} {
		err := talk(tc.addr, tc.cfg)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	// The pinned host reaches a coordinator that lets it in (enrollment).
	open := serve(pki.ServerConfig(ca.Pool(), keysOf(ca, pki.RoleCoordinator, "c1"), false))
	if err := talk(open, pki.PinnedConfig(ca.Pin())); err != nil {
		t.Errorf("pinned host to an enrolling coordinator: %v", err)
	}
	if err := talk(open, pki.PinnedConfig(other.Pin())); !errors.Is(err, pki.ErrPinMismatch) {
		t.Errorf("host pinning another CA: %v, want ErrPinMismatch", err)
	}

	// A Trust changes what new handshakes accept (a rotation of the
	// cluster CA): both ways, server and client.
	serverTrust := pki.NewTrust(ca.Cert)
	rotating := serve(pki.TrustServerConfig(serverTrust, keysOf(other, pki.RoleCoordinator, "c1"), true))
	clientTrust := pki.NewTrust(ca.Cert)
	newNode := keysOf(other, pki.RoleNode, "n3")
	if err := talk(rotating, pki.TrustClientConfig(clientTrust, newNode, pki.RoleCoordinator, "")); err == nil {
		t.Errorf("a server of the new CA reached by a client trusting the old one alone")
	}
	clientTrust.Set([]*x509.Certificate{ca.Cert, other.Cert})
	if err := talk(rotating, pki.TrustClientConfig(clientTrust, newNode, pki.RoleCoordinator, "")); err == nil {
		t.Errorf("a client of the new CA let in by a server trusting the old one alone")
	}
	serverTrust.Set([]*x509.Certificate{ca.Cert, other.Cert})
	if err := talk(rotating, pki.TrustClientConfig(clientTrust, newNode, pki.RoleCoordinator, "")); err != nil {
		t.Errorf("both trusting both CAs: %v", err)
	}
	if err := talk(rotating, pki.TrustClientConfig(clientTrust, mine, pki.RoleCoordinator, "")); err != nil {
		t.Errorf("a client of the old CA during the rotation: %v", err)
	}
	serverTrust.Set([]*x509.Certificate{other.Cert})
	if err := talk(rotating, pki.TrustClientConfig(clientTrust, mine, pki.RoleCoordinator, "")); err == nil {
		t.Errorf("a client of the retired CA let in")
	}
	if got := pki.IssuerOf(newNode.Get().Leaf, clientTrust.Certs()); got == nil || pki.Pin(got) != other.Pin() {
		t.Errorf("IssuerOf(a certificate of the new CA) = %v", got)
	}
	if cas, err := pki.ParseCerts(clientTrust.PEM()); err != nil || len(cas) != 2 {
		t.Errorf("ParseCerts(the trust's PEM) = %d certificates, %v; want 2", len(cas), err)
	}
}

// TestSkewedSignerIssuesUsableCerts: a CA whose clock runs up to an hour
// ahead of (or behind) its peers' issues certificates they accept at
// once; beyond an hour ahead they are not valid yet.
func TestSkewedSignerIssuesUsableCerts(t *testing.T) {
	for _, tc := range []struct {
		skew  time.Duration
		valid bool
	}{{50 * time.Minute, true}, {-50 * time.Minute, true}, {-24 * time.Hour, true}, {2 * time.Hour, false}} {
		ca := newCA(t)
		var clk clock.Offset
		clk.Set(tc.skew)
		ca.Clock = &clk
		c, k, _, err := ca.IssueKeyPair(pki.Request{Role: pki.RoleNode, ID: "n1", TTL: 30 * 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		kp, err := pki.KeyPair(c, k, ca.CertPEM)
		if err != nil {
			t.Fatal(err)
		}
		_, err = kp.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		if (err == nil) != tc.valid {
			t.Errorf("signer %s off: verifying its certificate now = %v, want valid %t", tc.skew, err, tc.valid)
		}
	}
}
