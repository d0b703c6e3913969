package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestExtensionsEndToEnd: an operator adds extensions with the CLI; a
// lint extension refuses a push that commits a secrets file, with its
// lines in git push's output, and lets the fixed push through; a
// mutating one gives guests a default memory, shown in guest show.
func TestExtensionsEndToEnd(t *testing.T) {
	l := newDeployLab(t)
	c := l.c
	// The extensions' server runs in the coordinator's namespace, over
	// TLS that wants the coordinator's certificate.
	caPEM, err := os.ReadFile(c.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Kind   string         `json:"kind"`
			Object map[string]any `json:"object"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, "bad payload", http.StatusBadRequest)
			return
		}
		answer := map[string]any{"allowed": true}
		switch r.URL.Path {
		case "/no-secrets":
			files, _ := req.Object["changedFiles"].([]any)
			var lines []string
			for _, f := range files {
				if s, _ := f.(string); strings.HasSuffix(s, ".env") {
					lines = append(lines, s+" holds secrets: use corpus config set, not git")
				}
			}
			lines = append(lines, "checked "+req.Object["commit"].(string)[:12])
			answer["lines"] = lines
			if len(lines) > 1 {
				answer["allowed"], answer["message"] = false, "secrets committed"
			}
		case "/memory":
			spec, _ := req.Object["spec"].(map[string]any)
			res, _ := spec["resources"].(map[string]any)
			if res == nil {
				res = map[string]any{}
				spec["resources"] = res
			}
			res["memoryBytes"] = "50331648"
			answer["object"] = req.Object
		}
		json.NewEncoder(w).Encode(answer)
	}))
	srv.Listener = listenIn(t, c.lab.ctl)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.StartTLS()
	defer srv.Close()
	hookCA := filepath.Join(tempDir(t), "hooks-ca.pem")
	os.WriteFile(hookCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644)

	c.mustCLI("extension", "add", "no-secrets", "--url", srv.URL+"/no-secrets", "--ca", hookCA, "--on", "deploy", "--kind", "lint")
	c.mustCLI("extension", "add", "memory", "--url", srv.URL+"/memory", "--ca", hookCA, "--on", "guest.create", "--kind", "mutate", "--priority", "5")
	if _, stderr, code := c.cli("extension", "add", "bad", "--url", "http://plain/", "--on", "guest.create", "--kind", "mutate"); code == 0 || !strings.Contains(stderr, "https") {
		t.Errorf("a plain http extension was accepted: %s", stderr)
	}
	var list struct {
		Extensions []struct {
			Extension struct {
				Name string `json:"name"`
			} `json:"extension"`
		} `json:"extensions"`
	}
	if err := c.json(&list, "extension", "list"); err != nil || len(list.Extensions) != 2 || list.Extensions[0].Extension.Name != "memory" {
		t.Errorf("extension list: %+v, %v", list, err)
	}

	// A push with a secrets file is refused before its pipeline.
	l.commitSite("one")
	l.write("prod.env", "DB_PASSWORD=hunter2\n", 0o644)
	l.git("add", "-A")
	l.git("commit", "-q", "-m", "with secrets")
	out, err := l.push()
	if err == nil {
		t.Fatalf("the push with prod.env was accepted:\n%s", out)
	}
	for _, want := range []string{"lint: no-secrets: prod.env holds secrets", "push refused by extension no-secrets: secrets committed", "refused by the lint extension no-secrets"} {
		if !strings.Contains(out, want) {
			t.Errorf("git push output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Deploying") {
		t.Errorf("the refused push reached the pipeline:\n%s", out)
	}
	if cur, rels := l.releases(); cur != 0 || len(rels) != 0 {
		t.Errorf("a refused push made releases: current %d, %d releases", cur, len(rels))
	}
	wantAudit(t, c, "refused git push", "user:alice", "hello/dev", "push refused by extension no-secrets: secrets committed")
	l.git("rm", "-q", "prod.env")
	l.git("commit", "-q", "-m", "without secrets")
	out = l.mustPush()
	if !strings.Contains(out, "lint: passed") {
		t.Errorf("the fixed push's output:\n%s", out)
	}
	l.wantPage("version one (r1)")

	// A guest created by the CLI gets the extension's memory, and says
	// who set it.
	c.mustCLI("guest", "create", "small", "--image", "busybox")
	show := c.mustCLI("guest", "show", "small")
	if !strings.Contains(show, "memory 48Mi,") {
		t.Errorf("guest show after the memory extension:\n%s", show)
	}
	if !strings.Contains(show, "Set by memory:") || !strings.Contains(show, `spec.resources.memoryBytes = "50331648"`) || strings.Contains(show, "(removed)") {
		t.Errorf("guest show does not say who set the memory:\n%s", show)
	}
	// The dashboard shows the extensions and who set what.
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("needs Chromium for the dashboard's part (apt-get install chromium)")
	}
	ops := openPage(t, chromium, c.lab.ctl, "")
	ops.login(c.token)
	ops.go_("#/extensions")
	ops.wait("the extensions in order", `[...document.querySelectorAll('[data-testid=extension-row]')].map(r => r.dataset.name).join(' ') === 'memory no-secrets'`)
	ops.accessible()
	ops.go_("#/guests/small")
	ops.wait("who set the memory", `document.querySelector('[data-testid=admission]')?.textContent.includes('spec.resources.memoryBytes')`)
	ops.go_("#/extensions")
	ops.click("extension-toggle", `[data-name="memory"]`)
	eventually(t, 10*time.Second, "memory disabled from the page", func() error {
		if show := c.mustCLI("extension", "show", "memory"); !strings.Contains(show, "disabled") {
			return errors.New(show)
		}
		return nil
	})
	ops.logout()
	c.mustCLI("extension", "enable", "memory")
	c.mustCLI("extension", "disable", "memory")
	c.mustCLI("guest", "create", "plain", "--image", "busybox")
	if show := c.mustCLI("guest", "show", "plain"); strings.Contains(show, "Set by") {
		t.Errorf("a disabled extension changed a guest:\n%s", show)
	}
	var audit struct {
		Entries []struct {
			Action string `json:"action"`
		} `json:"entries"`
	}
	if err := c.json(&audit, "audit"); err != nil || !slices.ContainsFunc(audit.Entries, func(e struct {
		Action string `json:"action"`
	}) bool {
		return e.Action == "put_extension"
	}) {
		t.Errorf("extension changes in the audit log: %v", err)
	}
}

// listenIn listens on a loopback port of namespace ns.
func listenIn(t *testing.T, ns string) net.Listener {
	t.Helper()
	ln, err := inNamespace(ns, func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") })
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
