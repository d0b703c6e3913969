package lint

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs: every package has exactly one package comment, so
// `go doc` says what each package is for.
func TestPackageDocs(t *testing.T) {
	root := filepath.Join("..", "..")
	dirs := map[string][]string{}
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		name := d.Name()
		if !d.IsDir() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], path)
		}
		return nil
	})
	if len(dirs) < 10 {
		t.Fatalf("found only %d package folders; is the walk rooted right?", len(dirs))
	}
	for dir, files := range dirs {
		var docs []string
		generated := true
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(src), "Code generated") {
				generated = false
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if af.Doc != nil {
				docs = append(docs, filepath.Base(f))
			}
		}
		if generated {
			continue
		}
		switch len(docs) {
		case 1:
		case 0:
			t.Errorf("package %s has no package comment", dir)
		default:
			t.Errorf("package %s has package comments in %v; keep one", dir, docs)
		}
	}
}
