package coordinator_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"corpus/coordinator"
	"corpus/internal/pki"
)

// TestCertificateCoversListenAddresses: the API's certificate verifies
// for the address a browser dials (127.0.0.1, as the README gives for the
// dashboard), localhost and the --advertise-addr name, trusting the
// cluster CA and nothing else; a certificate issued before it had them
// is issued again at start.
func TestCertificateCoversListenAddresses(t *testing.T) {
	dir := t.TempDir()
	advertise := func(c *coordinator.Config) { c.AdvertiseAPI = "api.corpus.example.test:7400" }
	s := start(t, dir, advertise)
	_, port, _ := net.SplitHostPort(s.APIAddr())
	pool := x509.NewCertPool()
	ca, err := pki.ParseCert(s.CACert())
	if err != nil {
		t.Fatal(err)
	}
	pool.AddCert(ca)
	verify := func(when string) {
		t.Helper()
		for _, name := range []string{"127.0.0.1", "localhost", "api.corpus.example.test", pki.ServerName} {
			d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{RootCAs: pool, ServerName: name}}
			conn, err := d.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
			if err != nil {
				t.Errorf("%s: TLS to the API as %q = %v, want its certificate to verify", when, name, err)
				continue
			}
			conn.Close()
		}
	}
	verify("new replica")

	// The certificate of an older replica: the CA's, without addresses.
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	tlsDir := filepath.Join(dir, coordinator.TLSDir)
	caPEM, err1 := os.ReadFile(filepath.Join(tlsDir, coordinator.CACertFile))
	keyPEM, err2 := os.ReadFile(filepath.Join(tlsDir, "ca.key"))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	auth, err := pki.LoadCA(caPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, ownKey, _, err := auth.IssueKeyPair(pki.Request{Role: pki.RoleCoordinator, ID: "coordinator-1", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tlsDir, "coordinator.crt"), certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tlsDir, "coordinator.key"), ownKey, 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, dir, advertise, func(c *coordinator.Config) { c.APIAddr = net.JoinHostPort("127.0.0.1", port) })
	verify("certificate without addresses, restarted")
}
