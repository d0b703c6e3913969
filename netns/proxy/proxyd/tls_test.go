package proxyd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"corpus/netns/proxy"
)

// pemCert is a self-signed certificate for name, as PEM.
func pemCert(t *testing.T, name string) (string, string, *x509.Certificate) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalPKCS8PrivateKey(key)
	leaf, _ := x509.ParseCertificate(der)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})), leaf
}

// TestRouteKeysStayInMemory: a route's certificate key is handed to a
// successor with the listeners, and never written to the folder or shown
// by the control socket.
func TestRouteKeysStayInMemory(t *testing.T) {
	dir := t.TempDir()
	pc := proxy.Config{HTTPAddr: "127.0.0.1:0", HTTPSAddr: "127.0.0.1:0"}
	start(t, dir, false, pc)
	c := client(dir)
	certPEM, keyPEM, leaf := pemCert(t, "a.test")
	routes := proxy.Routes{HTTP: map[string]proxy.HTTPRoute{"a.test": {Targets: []string{"127.0.0.1:9"}, HTTPS: true}},
		TLS: map[string]proxy.TLSDomain{"a.test": {CertPEM: certPEM, KeyPEM: keyPEM}}}
	if err := c.SetRoutes(routes); err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	served := func() *x509.Certificate {
		t.Helper()
		conn, err := tls.Dial("tcp", st.HTTPSAddr, &tls.Config{ServerName: "a.test", InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	if !served().Equal(leaf) {
		t.Fatal("the route's certificate is not served")
	}
	start(t, dir, true, pc)
	if !served().Equal(leaf) {
		t.Error("the successor does not serve the certificate it was handed")
	}
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(path); strings.Contains(string(b), "PRIVATE KEY") || strings.Contains(string(b), strings.TrimSpace(keyPEM)[30:60]) {
				t.Errorf("%s holds the key", path)
			}
		}
		return nil
	})
	if got := c.Routes(); got.TLS != nil {
		t.Errorf("the control socket shows TLS material: %v", got.TLS)
	}
}
