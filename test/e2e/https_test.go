package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pebble is a real ACME CA (letsencrypt/pebble) in the coordinator's
// namespace: it resolves domains through the coordinator's DNS and
// validates challenges against the nodes' proxies, as a public CA would.
type pebble struct {
	cmd    *exec.Cmd
	caFile string // the root its directory's HTTPS certificate verifies with
	ns     string
}

// startPebble runs pebble on localhost:14000 (directory) and :15000
// (management) in namespace ns, validating http-01 on port 80 and
// tls-alpn-01 on 443, resolving through dnsAddr.
func startPebble(t *testing.T, ns, dnsAddr string) *pebble {
	t.Helper()
	bin, err := exec.LookPath("pebble")
	if err != nil {
		if os.Getenv("CORPUS_TEST_REQUIRE_PEBBLE") == "1" {
			t.Fatal("pebble is not installed (make test-tools installs it)")
		}
		t.Skip("needs pebble, the ACME test CA (make test-tools installs it)")
	}
	certFile, keyFile, _ := selfSigned(t, "localhost")
	dir := t.TempDir()
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress": "0.0.0.0:14000", "managementListenAddress": "0.0.0.0:15000",
		"certificate": certFile, "privateKey": keyFile, "httpPort": 80, "tlsPort": 443,
		"ocspResponderURL": "", "externalAccountBindingRequired": false,
	}}
	b, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	p := &pebble{caFile: certFile, ns: ns}
	log := &syncBuffer{}
	p.cmd = exec.Command("ip", "netns", "exec", ns, bin, "-config", cfgFile, "-dnsserver", dnsAddr)
	p.cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting pebble: %v", err)
	}
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("--- log of pebble ---\n%s", log.String())
		}
	})
	eventually(t, 20*time.Second, "pebble serving", func() error {
		_, err := p.get("/roots/0")
		return err
	})
	return p
}

// get reads a page of pebble's management API.
func (p *pebble) get(path string) ([]byte, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dialIn(p.ns),
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the test's own CA's management page
	res, err := c.Get("https://localhost:15000" + path)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return nil, errors.New(res.Status)
	}
	return io.ReadAll(res.Body)
}

// roots is the pool of the certificates pebble issues, root and
// intermediate.
func (p *pebble) roots(t *testing.T) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	for _, path := range []string{"/roots/0", "/intermediates/0"} {
		b, err := p.get(path)
		if err != nil || !pool.AppendCertsFromPEM(b) {
			t.Fatalf("pebble %s: %v", path, err)
		}
	}
	return pool
}

// routeCert is the certificate part of `ingress list --json`.
type routeCert struct {
	State     string `json:"state"`
	Serial    string `json:"serial"`
	LastError string `json:"last_error"`
	NextAt    string `json:"next_attempt_at"`
	Challenge string `json:"challenge"`
}

func (c *cluster) routeCert(domain string) (routeCert, error) {
	var list struct {
		Routes []struct {
			Route struct {
				Domain string `json:"domain"`
			} `json:"route"`
			Certificate *routeCert `json:"certificate"`
		} `json:"routes"`
	}
	if err := c.json(&list, "ingress", "list"); err != nil {
		return routeCert{}, err
	}
	for _, r := range list.Routes {
		if r.Route.Domain == domain && r.Certificate != nil {
			return *r.Certificate, nil
		}
	}
	return routeCert{}, fmt.Errorf("no certificate for %s yet", domain)
}

// TestAutomaticHTTPS: an https route gets a certificate from a real
// ACME CA by http-01 then tls-alpn-01, served by the node's proxy with
// the redirect and HSTS asked for; a failed order (the CA gone) is shown
// with its next retry while the previous certificate serves on.
func TestAutomaticHTTPS(t *testing.T) {
	c := newCluster(t)
	a := c.addAgent("n1")
	client, nodeAddr := c.lab.addClient(a.node)
	ca := startPebble(t, c.lab.ctl, "127.0.0.1:8600")
	const domain = "secure.corpus.test"

	c.mustCLI("guest", "create", "web", "--image", "busybox", "--memory", "64M", "--cpus", "0.2")
	serveHTTP(t, c, "web", "hello")
	// The CA finds the node through corpus's DNS.
	c.mustCLI("dns", "add", "secure", "A", a.node.addr)
	c.mustCLI("guest", "expose", "web", "--domain", domain, "--port", "80", "--https", "--redirect", "--hsts")
	if out := c.mustCLI("ingress", "list"); !containsAll(out, "https://"+domain, "awaiting order") {
		t.Errorf("ingress list before any ACME account:\n%s", out)
	}
	if _, errOut, code := c.cli("ingress", "acme", "set", "--directory", "ftp://nope"); code == 0 {
		t.Errorf("acme set with an ftp directory succeeded: %s", errOut)
	}
	c.mustCLI("ingress", "acme", "set", "--directory", "https://localhost:14000/dir", "--ca", ca.caFile, "--email", "ops@example.test")

	var first routeCert
	eventually(t, 90*time.Second, "certificate issued by http-01", func() error {
		var err error
		if first, err = c.routeCert(domain); err == nil && first.State != "valid" {
			err = fmt.Errorf("certificate %+v", first)
		}
		return err
	})
	roots := ca.roots(t)
	hs := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dialIn(client), DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: domain}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	serial := func() (string, error) {
		req, _ := http.NewRequest("GET", "https://"+nodeAddr+"/", nil)
		req.Host = domain
		res, err := hs.Do(req)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 || strings.TrimSpace(string(body)) != "hello" || res.Header.Get("Strict-Transport-Security") == "" {
			return "", fmt.Errorf("https = %d %q hsts %q", res.StatusCode, body, res.Header.Get("Strict-Transport-Security"))
		}
		return hex.EncodeToString(res.TLS.PeerCertificates[0].SerialNumber.Bytes()), nil
	}
	eventually(t, 20*time.Second, "https with the CA's certificate", func() error {
		s, err := serial()
		if err == nil && s != first.Serial {
			err = fmt.Errorf("serving serial %s, want %s", s, first.Serial)
		}
		return err
	})
	// Plain HTTP is redirected.
	hc := httpIn(client)
	hc.CheckRedirect = hs.CheckRedirect
	req, _ := http.NewRequest("GET", "http://"+nodeAddr+"/path?q=1", nil)
	req.Host = domain
	if res, err := hc.Do(req); err != nil || res.StatusCode != http.StatusPermanentRedirect || res.Header.Get("Location") != "https://"+domain+"/path?q=1" {
		t.Errorf("plain http = %v %v, want 308 to https://%s/path?q=1", res, err, domain)
	}

	// tls-alpn-01 only (port 80 unreachable, say): a renewal orders anew.
	c.mustCLI("ingress", "acme", "set", "--directory", "https://localhost:14000/dir", "--ca", ca.caFile, "--email", "ops@example.test", "--challenge", "tls-alpn-01")
	c.mustCLI("ingress", "renew", domain)
	var second routeCert
	eventually(t, 90*time.Second, "certificate renewed by tls-alpn-01", func() error {
		var err error
		if second, err = c.routeCert(domain); err == nil && (second.State != "valid" || second.Serial == first.Serial) {
			err = fmt.Errorf("certificate %+v", second)
		}
		return err
	})
	eventually(t, 20*time.Second, "https with the renewed certificate", func() error {
		s, err := serial()
		if err == nil && s != second.Serial {
			err = fmt.Errorf("serving serial %s, want %s", s, second.Serial)
		}
		return err
	})

	// The CA gone: the order fails, says why and when it retries, and
	// the certificate the domain had serves on.
	ca.cmd.Process.Kill()
	c.mustCLI("ingress", "renew", domain)
	eventually(t, 60*time.Second, "a failed order shown", func() error {
		rc, err := c.routeCert(domain)
		if err == nil && (rc.State != "failed" || rc.LastError == "" || rc.NextAt == "") {
			err = fmt.Errorf("certificate %+v", rc)
		}
		return err
	})
	if out := c.mustCLI("ingress", "list"); !containsAll(out, "failed", "previous serves until", "retry") {
		t.Errorf("ingress list after a failed order:\n%s", out)
	}
	if s, err := serial(); err != nil || s != second.Serial {
		t.Errorf("after a failed order https serves %s, %v; want the previous certificate %s", s, err, second.Serial)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
