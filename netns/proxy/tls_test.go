package proxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// selfSigned writes a self-signed certificate for names into dir and
// returns its files and the parsed certificate.
func selfSigned(t testing.TB, dir, file string, names ...string) (CertFiles, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: names[0]},
		DNSNames:              names,
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // so it can be its own root in the client pool
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cf := CertFiles{CertFile: filepath.Join(dir, file+".pem"), KeyFile: filepath.Join(dir, file+".key")}
	if err := os.WriteFile(cf.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cf.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cf, cert
}

func TestHTTPSBySNI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	filesA, certA := selfSigned(t, dir, "a", "a.test")
	filesB, certB := selfSigned(t, dir, "b", "b.test", "www.b.test")
	filesW, certW := selfSigned(t, dir, "w", "*.w.test")
	roots := x509.NewCertPool()
	for _, c := range []*x509.Certificate{certA, certB, certW} {
		roots.AddCert(c)
	}
	be := startBackend(t, "tls", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.Host, r.Header.Get("X-Forwarded-Proto"))
	}))
	p := startProxy(t, Config{HTTPSAddr: "127.0.0.1:0", Certs: []CertFiles{filesA, filesB, filesW}})
	mustSetRoutes(t, p, httpRoutes("a.test", be.addr(), "www.b.test", be.addr(), "x.w.test", be.addr()))

	tests := []struct {
		host       string
		insecure   bool // the name has no certificate: accept the default one
		wantCert   string
		wantStatus int
		wantBody   string
	}{
		{host: "a.test", wantCert: "a.test", wantStatus: 200, wantBody: "a.test https"},
		{host: "www.b.test", wantCert: "b.test", wantStatus: 200, wantBody: "www.b.test https"},
		{host: "x.w.test", wantCert: "*.w.test", wantStatus: 200, wantBody: "x.w.test https"},
		{host: "nocert.test", insecure: true, wantCert: "a.test", wantStatus: 404, wantBody: "no route for host nocert.test\n"},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			tr := &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, "tcp", p.HTTPSAddr().String())
				},
				TLSClientConfig:   &tls.Config{RootCAs: roots, InsecureSkipVerify: tc.insecure},
				ForceAttemptHTTP2: true,
			}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + tc.host + "/")
			if err != nil {
				t.Fatalf("GET https://%s/: %v", tc.host, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantStatus || string(body) != tc.wantBody {
				t.Errorf("GET https://%s/ = %d %q, want %d %q", tc.host, resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
			if got := resp.TLS.PeerCertificates[0].Subject.CommonName; got != tc.wantCert {
				t.Errorf("certificate for SNI %s = %s, want %s", tc.host, got, tc.wantCert)
			}
			if resp.ProtoMajor != 2 {
				t.Errorf("protocol = %s, want HTTP/2 to TLS clients", resp.Proto)
			}
		})
	}
}

func TestNewCertificateErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, _ := selfSigned(t, dir, "good", "good.test")
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("not pem"), 0o600)
	tests := []struct {
		name  string
		certs []CertFiles
	}{
		{"missing file", []CertFiles{{CertFile: filepath.Join(dir, "nope.pem"), KeyFile: good.KeyFile}}},
		{"not pem", []CertFiles{{CertFile: garbage, KeyFile: good.KeyFile}}},
		{"key of another cert", []CertFiles{{CertFile: good.CertFile, KeyFile: garbage}}},
	}
	for _, tc := range tests {
		_, err := New(Config{HTTPAddr: "127.0.0.1:0", HTTPSAddr: "127.0.0.1:0", Certs: tc.certs})
		if !errors.Is(err, ErrCertificate) {
			t.Errorf("%s: New = %v, want ErrCertificate", tc.name, err)
		}
	}
}

// TestHTTP2OverTLS: clients that offer HTTP/2 over TLS get it (ALPN h2),
// routed by :authority and proxied to an HTTP/1.1 target.
func TestHTTP2OverTLS(t *testing.T) {
	t.Parallel()
	files, cert := selfSigned(t, t.TempDir(), "a", "a.test")
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	be := startBackend(t, "h2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "target saw %s", r.Proto)
	}))
	p := startProxy(t, Config{HTTPSAddr: "127.0.0.1:0", Certs: []CertFiles{files}})
	mustSetRoutes(t, p, httpRoutes("a.test", be.addr()))
	tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "a.test"}}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "https://"+p.HTTPSAddr().String()+"/", nil)
	req.Host = "a.test"
	res, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.Proto != "HTTP/2.0" || res.TLS.NegotiatedProtocol != "h2" || string(body) != "target saw HTTP/1.1" {
		t.Errorf("over TLS: %s (ALPN %q) %q; want HTTP/2.0, h2, the target on HTTP/1.1", res.Proto, res.TLS.NegotiatedProtocol, body)
	}
}
