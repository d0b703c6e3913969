package backup

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			out[rel] = string(b)
		}
		return nil
	})
	return out
}

// TestArchiveExtract: a restore replaces a folder's files with the
// archived ones (a file added since goes, one changed comes back, modes
// kept, lost+found left alone); a bad archive changes nothing.
func TestArchiveExtract(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	writeTree(t, src, map[string]string{"a.txt": "one", "sub/b.txt": "two", "lost+found/x": "fsck's"})
	if err := os.Chmod(filepath.Join(src, "a.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	var arch bytes.Buffer
	c := NewCounter(&arch)
	if err := Archive(ctx, src, c); err != nil {
		t.Fatal(err)
	}
	sum := c.Sum()

	dst := t.TempDir()
	writeTree(t, dst, map[string]string{"a.txt": "changed", "new.txt": "added later", "lost+found/y": "mine"})
	f, err := Spool(t.TempDir(), bytes.NewReader(arch.Bytes()), int64(arch.Len()), sum)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Extract(ctx, dst, f); err != nil {
		t.Fatal(err)
	}
	got := readTree(t, dst)
	want := map[string]string{"a.txt": "one", "sub/b.txt": "two", "lost+found/y": "mine"}
	if len(got) != len(want) {
		t.Errorf("after the restore: %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if st, err := os.Stat(filepath.Join(dst, "a.txt")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("a.txt mode = %v, %v; want 0600", st.Mode(), err)
	}

	// Garbage, or half an archive: refused, the files as they were.
	if err := Extract(ctx, dst, strings.NewReader("not an archive")); err == nil {
		t.Error("extracting garbage succeeded")
	}
	if err := Extract(ctx, dst, bytes.NewReader(arch.Bytes()[:arch.Len()/2])); err == nil {
		t.Error("extracting half an archive succeeded")
	}
	if got := readTree(t, dst); got["a.txt"] != "one" || len(got) != len(want) {
		t.Errorf("after a failed restore: %v", got)
	}
	// A spool refuses data that is not what the sender said.
	if _, err := Spool(t.TempDir(), strings.NewReader("x"), 1, sum); err == nil {
		t.Error("Spool took data with another checksum")
	}
}
