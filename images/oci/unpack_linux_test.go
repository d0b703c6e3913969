package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"corpus/images/oci/ocitest"
)

// breakouts are layers whose entries try to reach out of the tree they
// are unpacked into; outside is an absolute folder of the host beside
// the tree holding one file, "sentinel".
func breakouts(outside string) map[string][]ocitest.File {
	climb := strings.Repeat("../", 20)
	return map[string][]ocitest.File{
		"absolute symlink then a file through it": {
			{Name: "escape", Typ: tar.TypeSymlink, Link: outside},
			{Name: "escape/pwned", Body: "pwned"},
		},
		"dot-dot paths": {
			{Name: "../outside/pwned", Body: "pwned"},
			{Name: climb + strings.TrimPrefix(outside, "/") + "/pwned", Body: "pwned"},
		},
		"relative symlink climbing out": {
			{Name: "up", Typ: tar.TypeSymlink, Link: climb},
			{Name: "up" + outside + "/pwned", Body: "pwned"},
		},
		"whiteout through a symlink": {
			{Name: "wh", Typ: tar.TypeSymlink, Link: outside},
			{Name: "wh/.wh.sentinel"},
		},
		"opaque folder through a symlink": {
			{Name: "op", Typ: tar.TypeSymlink, Link: outside},
			{Name: "op/.wh..wh..opq"},
		},
		"file over a symlink to a host file": {
			{Name: "f", Typ: tar.TypeSymlink, Link: outside + "/sentinel"},
			{Name: "f", Body: "pwned"},
		},
		"hard link to a host file": {
			{Name: "passwd", Typ: tar.TypeLink, Link: outside + "/sentinel"},
		},
		"hard link through an absolute symlink": {
			{Name: "ln", Typ: tar.TypeSymlink, Link: outside},
			{Name: "hl", Typ: tar.TypeLink, Link: "ln/sentinel"},
		},
		"device nodes": {
			{Name: "dev/"},
			{Name: "dev/mem2", Typ: tar.TypeChar, Major: 1, Minor: 1, Mode: 0o666},
			{Name: "dev/loop99", Typ: tar.TypeBlock, Major: 7, Minor: 0, Mode: 0o666},
			{Name: "dev/after", Body: "still unpacked"},
		},
		"set-uid root binary": {
			{Name: "bin/su", Body: "#!/bin/sh\n", Mode: 0o4755},
		},
	}
}

// checkContained fails unless outside still holds only its sentinel,
// unchanged, and tree holds no device node.
func checkContained(t *testing.T, tree, outside string) {
	t.Helper()
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatalf("reading %s: %v", outside, err)
	}
	if len(entries) != 1 || entries[0].Name() != "sentinel" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("outside the tree: %v, want only sentinel", names)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "sentinel")); err != nil || string(b) != "host" {
		t.Errorf("sentinel outside the tree = %q, %v, want host", b, err)
	}
	filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type()&(fs.ModeDevice|fs.ModeCharDevice) != 0 {
			t.Errorf("device node %s was created", p)
		}
		return nil
	})
}

// sandbox makes a tree to unpack into and the folder outside it.
func sandbox(t *testing.T) (tree, outside string) {
	t.Helper()
	dir := t.TempDir()
	tree, outside = filepath.Join(dir, "tree"), filepath.Join(dir, "outside")
	for _, d := range []string{tree, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "sentinel"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	return tree, outside
}

// TestUnpackBreakouts applies each breakout layer alone: whether it is
// refused or unpacked, nothing outside the tree is written or removed,
// and no device node is made.
func TestUnpackBreakouts(t *testing.T) {
	needRoot(t)
	t.Parallel()
	for name := range breakouts("/") {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tree, outside := sandbox(t)
			var logs bytes.Buffer
			err := applyLayer(tree, bytes.NewReader(ocitest.Tar(t, breakouts(outside)[name]...)), slog.New(slog.NewTextHandler(&logs, nil)))
			t.Logf("applyLayer: %v", err)
			checkContained(t, tree, outside)
			switch name {
			case "device nodes":
				if err != nil {
					t.Errorf("applyLayer = %v, want device nodes skipped", err)
				}
				if b, _ := os.ReadFile(filepath.Join(tree, "dev/after")); string(b) != "still unpacked" {
					t.Errorf("dev/after = %q, want the entries after the skipped nodes unpacked", b)
				}
				if got := strings.Count(logs.String(), "skipping a device node"); got != 2 {
					t.Errorf("log says %d device nodes skipped, want 2:\n%s", got, logs.String())
				}
			case "set-uid root binary":
				st, err := os.Stat(filepath.Join(tree, "bin/su"))
				if err != nil || st.Mode()&fs.ModeSetuid == 0 {
					t.Errorf("bin/su = %v, %v, want set-uid inside the tree", st, err)
				}
			case "file over a symlink to a host file":
				if b, _ := os.ReadFile(filepath.Join(tree, "f")); string(b) != "pwned" {
					t.Errorf("f = %q, want the layer's file in place of the symlink", b)
				}
			}
		})
	}
}

// TestUnpackBreakoutImage pulls one image made of every breakout layer
// from a registry and unpacks it: the tree is refused or made, nothing
// outside it is touched, and the folder holding it is root's alone.
func TestUnpackBreakoutImage(t *testing.T) {
	needRoot(t)
	t.Parallel()
	reg := ocitest.Registry(t)
	tree, outside := sandbox(t)
	var layers []v1.Layer
	for _, files := range breakouts(outside) {
		layers = append(layers, ocitest.Layer(t, files...))
	}
	ocitest.Push(t, reg+"/test/breakout:1", ocitest.Image(t, v1.Config{}, layers...))
	s := &Store{Root: t.TempDir()}
	img, err := s.Pull(context.Background(), reg+"/test/breakout:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tree, "images", "rootfs")
	err = s.Unpack(context.Background(), img, dir)
	t.Logf("Unpack: %v", err)
	checkContained(t, tree, outside)
	if st, err := os.Stat(filepath.Dir(dir)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("the folder holding the tree = %v, %v, want mode 0700", st, err)
	}
}

// FuzzApplyLayer: whatever tar a layer holds, applying it writes nothing
// outside the tree and makes no device node. The seeds are the breakout
// catalogue's layers, aimed at an outside folder at a path of this
// process's own, made anew for every input.
func FuzzApplyLayer(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("unpacking keeps owners and set-id bits: needs root")
	}
	outside := filepath.Join(os.TempDir(), fmt.Sprintf("corpus-fuzz-outside-%d", os.Getpid()))
	f.Cleanup(func() { os.RemoveAll(outside) })
	for _, files := range breakouts(outside) {
		f.Add(ocitest.Tar(f, files...))
	}
	f.Fuzz(func(t *testing.T, layer []byte) {
		os.RemoveAll(outside)
		if err := os.Mkdir(outside, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(outside, "sentinel"), []byte("host"), 0o644); err != nil {
			t.Fatal(err)
		}
		tree := t.TempDir()
		applyLayer(tree, bytes.NewReader(layer), slog.New(slog.DiscardHandler))
		checkContained(t, tree, outside)
	})
}
