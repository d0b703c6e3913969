package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProjectExportImport: a project exported from one cluster, values
// encrypted to a key made on the other side, is imported into a fresh
// cluster with the same shape (scale and autoscale included) and values;
// the file shows no value.
func TestProjectExportImport(t *testing.T) {
	a := newCluster(t)
	b := newCluster(t)
	a.mustCLI("project", "create", "site", "--image", "busybox", "--domain", "site.example.test", "--https", "--volume-size", "512M", "--detach")
	a.mustCLI("service", "create", "pay", "--external", "https://pay.example.test", "--secret", "API_KEY=k3y-in-clear")
	a.mustCLI("service", "link", "pay", "site", "--no-restart")
	a.mustCLI("config", "set", "site", "GREETING=hello-world", "--no-restart")
	a.mustCLI("scale", "site", "web=2", "worker=1", "--shared-nothing", "--max-parallel", "2")
	a.mustCLI("autoscale", "site", "web", "--min", "2", "--max", "4", "--target-rps", "100")

	dir := t.TempDir()
	keyFile := filepath.Join(dir, "site.key")
	pub := strings.TrimSpace(b.mustCLI("project", "keygen", "--out", keyFile))
	file := filepath.Join(dir, "site.yaml")
	a.mustCLI("project", "export", "site", "--with-secrets", "--recipient", pub, "-o", file)
	doc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(doc), "k3y-in-clear") || strings.Contains(string(doc), "hello-world") || !containsAll(string(doc), "site.example.test", "scale:", "autoscale:", "target_rps: 100") {
		t.Fatalf("the exported file:\n%s", doc)
	}
	if _, errOut, code := b.cli("project", "import", file); code == 0 || !strings.Contains(errOut, "--key") {
		t.Errorf("import without the key: exit %d, %s", code, errOut)
	}
	out := b.mustCLI("project", "import", file, "--key", keyFile)
	if !containsAll(out, "created service pay", "created environment site/dev", "created link pay -> site/dev") {
		t.Errorf("import said:\n%s", out)
	}
	// Same shape: the two clusters export the same file, values aside.
	shape := func(c *cluster) string { return c.mustCLI("project", "export", "site") }
	if sa, sb := shape(a), shape(b); sa != sb {
		t.Errorf("the imported project's shape differs:\n%s\nvs\n%s", sa, sb)
	}
	cfg := b.mustCLI("config", "list", "site", "--reveal")
	if !containsAll(cfg, "GREETING", "hello-world", "PAY_API_KEY", "k3y-in-clear") {
		t.Errorf("the imported config:\n%s", cfg)
	}
	// A second import changes nothing and says why.
	if _, errOut, code := b.cli("project", "import", file, "--key", keyFile); code == 0 || !strings.Contains(errOut, "already") {
		t.Errorf("importing again: exit %d, %s", code, errOut)
	}
}
