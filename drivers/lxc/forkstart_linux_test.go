//go:build linux && cgo

package lxc

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHelperPath: the helper's PATH loses the folders holding newuidmap
// or newgidmap, and keeps the others in their order.
func TestHelperPath(t *testing.T) {
	dir := t.TempDir()
	mk := func(folder string, tools ...string) string {
		p := filepath.Join(dir, folder)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, tool := range tools {
			if err := os.WriteFile(filepath.Join(p, tool), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	sbin, bin, local, onlyGid := mk("sbin", "apparmor_parser"), mk("bin", "newuidmap", "newgidmap", "sh"), mk("local"), mk("gid", "newgidmap")
	mk("named", "other")
	if err := os.Mkdir(filepath.Join(dir, "named", "newuidmap"), 0o755); err != nil { // a folder, not the tool
		t.Fatal(err)
	}
	named := filepath.Join(dir, "named")
	in := local + ":" + sbin + ":" + bin + ":" + onlyGid + ":" + named + ":" + filepath.Join(dir, "missing")
	want := local + ":" + sbin + ":" + named + ":" + filepath.Join(dir, "missing")
	if got := helperPath(in); got != want {
		t.Errorf("helperPath(%q)\n = %q\nwant %q", in, got, want)
	}
	if got := helperPath(""); got != "" {
		t.Errorf("helperPath(\"\") = %q, want empty", got)
	}
}
