package daemon

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"corpus/agent"
	"corpus/cmd/corpus/cli"
)

// TestDocsMan: `corpus docs man DIR` writes the pages the package ships
// and the units name (Documentation=man:...).
func TestDocsMan(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000") // 2023-11-14
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	root := cli.NewRoot(cli.NewGlobals(&stdout, &stderr), Commands)
	root.SetArgs([]string{"docs", "man", dir})
	if err := root.Execute(); err != nil {
		t.Fatalf("corpus docs man = %v", err)
	}
	for page, want := range map[string]string{
		"corpus.1":              ".TH \"CORPUS\" \"1\" \"Nov 2023\"",
		"corpus-coordinator.1":  "--raft-addr",
		"corpus-agent.1":        "--join-token",
		"corpus-node-add-k8s.1": "corpus-node-add-k8s - ",
		"corpus-version.1":      "version",
	} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Errorf("corpus docs man wrote no %s: %v", page, err)
			continue
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q", page, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "corpus-docs.1")); err == nil {
		t.Errorf("corpus docs man wrote a page for the hidden docs command")
	}
}

// TestDocsMarkdown: `corpus docs markdown DIR` (make docs) writes a page
// per command, the same on every host: no default read from the host
// name or the environment.
func TestDocsMarkdown(t *testing.T) {
	t.Setenv("CORPUS_LIBVIRT_IMAGES", "/srv/from-the-environment")
	dir := t.TempDir()
	root := cli.NewRoot(cli.NewGlobals(io.Discard, io.Discard), Commands)
	root.SetArgs([]string{"docs", "markdown", dir})
	if err := root.Execute(); err != nil {
		t.Fatalf("corpus docs markdown = %v", err)
	}
	pages, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil || len(pages) < 50 {
		t.Fatalf("corpus docs markdown wrote %d pages (%v), want one per command", len(pages), err)
	}
	for page, want := range map[string]string{
		"corpus_agent.md":        "--join-token",
		"corpus_node_add-k8s.md": "## corpus node add-k8s",
		"corpus_guest_list.md":   "[corpus guest](corpus_guest.md)",
	} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q (%v)", page, want, err)
		}
	}
	host := fmt.Sprintf("(default %q)", agent.Default().Name)
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, local := range []string{host, "/srv/from-the-environment", "Auto generated"} {
			if strings.Contains(string(b), local) {
				t.Errorf("%s has %q: the reference would differ from host to host", filepath.Base(p), local)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "corpus_docs.md")); err == nil {
		t.Errorf("corpus docs markdown wrote a page for the hidden docs command")
	}
}
