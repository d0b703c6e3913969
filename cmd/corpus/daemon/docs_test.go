package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
