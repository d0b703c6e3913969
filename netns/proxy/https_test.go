package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// pemPair makes a self-signed certificate for names and returns it as
// PEM strings with its leaf.
func pemPair(t testing.TB, names ...string) (string, string, *x509.Certificate) {
	t.Helper()
	dir := t.TempDir()
	files, leaf := selfSigned(t, dir, "c", names...)
	c, err := os.ReadFile(files.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	k, err := os.ReadFile(files.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return string(c), string(k), leaf
}

// tlsGet makes a request over TLS to the proxy's HTTPS listener for
// host, trusting roots; it returns the status, body, headers and the
// certificate served.
func tlsGet(t testing.TB, p *Proxy, roots *x509.CertPool, host, path string) (int, string, http.Header, *x509.Certificate) {
	t.Helper()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", p.HTTPSAddr().String())
		},
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + host + path)
	if err != nil {
		t.Fatalf("GET https://%s%s: %v", host, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header, resp.TLS.PeerCertificates[0]
}

// TestRouteCertificates: certificates given with the routes serve their
// domains without any certificate file, change with the table, and
// plain HTTP is redirected (and HTTPS carries HSTS) only where asked.
func TestRouteCertificates(t *testing.T) {
	t.Parallel()
	be := startBackend(t, "app", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("app " + r.Header.Get("X-Forwarded-Proto")))
	}))
	p := startProxy(t, Config{HTTPSAddr: "127.0.0.1:0"})
	certA, keyA, leafA := pemPair(t, "a.test")
	certB, keyB, leafB := pemPair(t, "b.test")
	roots := x509.NewCertPool()
	roots.AddCert(leafA)
	roots.AddCert(leafB)
	r := Routes{HTTP: map[string]HTTPRoute{
		"a.test": {Targets: []string{be.addr()}, HTTPS: true, RedirectHTTPS: true, HSTS: true},
		"b.test": {Targets: []string{be.addr()}, HTTPS: true},
		"c.test": {Targets: []string{be.addr()}, HTTPS: true, RedirectHTTPS: true}, // no certificate yet
	}, TLS: map[string]TLSDomain{"a.test": {CertPEM: certA, KeyPEM: keyA}, "b.test": {CertPEM: certB, KeyPEM: keyB}}}
	mustSetRoutes(t, p, r)

	code, body, h, leaf := tlsGet(t, p, roots, "a.test", "/x")
	if code != 200 || body != "app https" || leaf.Subject.CommonName != "a.test" || h.Get("Strict-Transport-Security") != hstsValue {
		t.Errorf("https a.test = %d %q %s hsts %q; want 200 from its own certificate with HSTS", code, body, leaf.Subject.CommonName, h.Get("Strict-Transport-Security"))
	}
	if code, _, h, leaf = tlsGet(t, p, roots, "b.test", "/"); code != 200 || leaf.Subject.CommonName != "b.test" || h.Get("Strict-Transport-Security") != "" {
		t.Errorf("https b.test = %d %s hsts %q; want 200, its certificate, no HSTS", code, leaf.Subject.CommonName, h.Get("Strict-Transport-Security"))
	}
	c := noRedirects(proxyClient(t, p.HTTPAddr().String(), nil))
	code, _, h = do(t, c, "GET", "a.test", "/x?y=1", nil)
	_, port, _ := net.SplitHostPort(p.HTTPSAddr().String())
	if want := "https://a.test:" + port + "/x?y=1"; code != http.StatusPermanentRedirect || h.Get("Location") != want {
		t.Errorf("http a.test = %d to %q, want 308 to %s", code, h.Get("Location"), want)
	}
	if code, body, _ = do(t, c, "GET", "b.test", "/", nil); code != 200 || body != "app http" {
		t.Errorf("http b.test = %d %q, want it served (no redirect asked)", code, body)
	}
	if code, _, _ = do(t, c, "GET", "c.test", "/", nil); code != 200 {
		t.Errorf("http c.test = %d, want it served: no certificate to redirect to yet", code)
	}
	// A name without a certificate fails its handshake: no file to fall back on.
	conn, err := tls.Dial("tcp", p.HTTPSAddr().String(), &tls.Config{ServerName: "c.test", InsecureSkipVerify: true})
	if err == nil {
		conn.Close()
		t.Error("a handshake for a name without a certificate succeeded")
	}

	// The next table replaces the certificate with the routes.
	certA2, keyA2, leafA2 := pemPair(t, "a.test")
	roots.AddCert(leafA2)
	r.TLS = map[string]TLSDomain{"a.test": {CertPEM: certA2, KeyPEM: keyA2}}
	mustSetRoutes(t, p, r)
	if _, _, _, leaf = tlsGet(t, p, roots, "a.test", "/"); !leaf.Equal(leafA2) {
		t.Error("a.test still serves its old certificate after SetRoutes")
	}

	// A broken certificate changes nothing.
	bad := r.clone()
	bad.TLS["b.test"] = TLSDomain{CertPEM: certB, KeyPEM: keyA}
	if err := p.SetRoutes(bad); !errors.Is(err, ErrCertificate) {
		t.Errorf("SetRoutes with a mismatched key = %v, want ErrCertificate", err)
	}
	if _, _, _, leaf = tlsGet(t, p, roots, "a.test", "/"); !leaf.Equal(leafA2) {
		t.Error("a refused table changed the certificates")
	}
	if got := p.Routes().WithoutKeys(); got.TLS != nil || len(got.HTTP) != 3 {
		t.Errorf("WithoutKeys = %d routes, tls %v; want the routes without TLS material", len(got.HTTP), got.TLS)
	}
}

// TestACMEChallenges: an http-01 token is answered on any host's
// well-known path, a tls-alpn-01 certificate only to acme-tls/1 clients.
func TestACMEChallenges(t *testing.T) {
	t.Parallel()
	be := startBackend(t, "app", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("app")) }))
	p := startProxy(t, Config{HTTPSAddr: "127.0.0.1:0"})
	cert, key, leaf := pemPair(t, "a.test")
	alpnCert, alpnKey, alpnLeaf := pemPair(t, "a.test")
	mustSetRoutes(t, p, Routes{
		HTTP:       map[string]HTTPRoute{"a.test": {Targets: []string{be.addr()}, HTTPS: true, RedirectHTTPS: true}},
		TLS:        map[string]TLSDomain{"a.test": {CertPEM: cert, KeyPEM: key, OCSP: []byte("ocsp response"), ALPNCertPEM: alpnCert, ALPNKeyPEM: alpnKey}},
		Challenges: map[string]string{"tok1": "tok1.thumb"},
	})
	c := noRedirects(proxyClient(t, p.HTTPAddr().String(), nil))
	if code, body, _ := do(t, c, "GET", "a.test", acmeChallengePrefix+"tok1", nil); code != 200 || body != "tok1.thumb" {
		t.Errorf("http-01 answer = %d %q, want 200 tok1.thumb (never redirected)", code, body)
	}
	if code, _, _ := do(t, c, "GET", "a.test", acmeChallengePrefix+"other", nil); code != http.StatusPermanentRedirect {
		t.Errorf("unknown token = %d, want the route's own answer (a redirect)", code)
	}
	var staple []byte
	served := func(protos []string) *x509.Certificate {
		conn, err := tls.Dial("tcp", p.HTTPSAddr().String(), &tls.Config{ServerName: "a.test", NextProtos: protos, InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("handshake with %v: %v", protos, err)
		}
		defer conn.Close()
		staple = conn.ConnectionState().OCSPResponse
		return conn.ConnectionState().PeerCertificates[0]
	}
	if got := served([]string{acmeTLSProto}); !got.Equal(alpnLeaf) {
		t.Error("an acme-tls/1 client did not get the challenge certificate")
	}
	if got := served([]string{"h2", "http/1.1"}); !got.Equal(leaf) {
		t.Error("a browser got something else than the domain's certificate")
	}
	if string(staple) != "ocsp response" {
		t.Errorf("stapled OCSP = %q, want the route's", staple)
	}
	if err := p.SetRoutes(Routes{Challenges: map[string]string{"a/b": "x"}}); err == nil {
		t.Error("a token with a slash was accepted")
	}
}

func noRedirects(c *http.Client) *http.Client {
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}
