package dns

import (
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestPackageComment checks that exactly one file carries the package
// comment.
func TestPackageComment(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			n++
			if !strings.HasPrefix(f.Doc.Text(), "Package dns ") {
				t.Errorf("%s: package comment does not start with \"Package dns \"", name)
			}
		}
	}
	if n != 1 {
		t.Errorf("package comments = %d, want 1", n)
	}
}
