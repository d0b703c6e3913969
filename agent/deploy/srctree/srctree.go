// Package srctree checks the tree of a release's source (a pushed
// commit's, as git ls-tree lists it) against the deploy contract and says
// what the pipeline needs of it: its install steps, its hooks, its size.
package srctree

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"corpus/agent/deploy/manifest"
)

// Entry is one line of `git ls-tree -r -l`.
type Entry struct {
	Mode string
	Type string
	Size int64
	Path string
	// Target is a symlink's target (filled by the caller).
	Target string
}

// Tree is what a pushed commit holds, as the pipeline needs to know it.
type Tree struct {
	Install []string          // install.d executables, in run order
	Hooks   map[string]bool   // hook name → present
	Size    int64             // bytes of all blobs
	Entries map[string]string // path → mode, for checks
}

// Check applies the contract's rules to a pushed tree and says what
// it holds: executable steps, symlinks that stay inside the release, no
// submodules.
func Check(entries []Entry, maxBytes int64) (*Tree, error) {
	t := &Tree{Hooks: map[string]bool{}, Entries: map[string]string{}}
	var errs []string
	for _, e := range entries {
		t.Entries[e.Path] = e.Mode
	}
	isLink := func(p string) bool { return t.Entries[p] == "120000" }
	for _, e := range entries {
		t.Size += e.Size
		switch {
		case e.Type == "commit":
			errs = append(errs, fmt.Sprintf("%s is a submodule; corpus deploys the tree as pushed, vendor it instead", e.Path))
			continue
		case e.Mode == "120000":
			if escapes(e.Path, e.Target, isLink) {
				errs = append(errs, fmt.Sprintf("symlink %s points outside the release (%s)", e.Path, e.Target))
			}
		}
		dir, name := path.Split(e.Path)
		switch {
		case dir == manifest.InstallDir+"/":
			if e.Mode != "100755" {
				errs = append(errs, fmt.Sprintf("%s is not executable (mode %s): git update-index --chmod=+x %s", e.Path, e.Mode, e.Path))
				continue
			}
			t.Install = append(t.Install, name)
		case dir == manifest.Dir+"/" && slices.Contains(manifest.HookNames, name):
			if e.Mode != "100755" {
				errs = append(errs, fmt.Sprintf("%s is not executable (mode %s): git update-index --chmod=+x %s", e.Path, e.Mode, e.Path))
				continue
			}
			t.Hooks[name] = true
		case strings.HasPrefix(e.Path, manifest.InstallDir+"/"):
			errs = append(errs, fmt.Sprintf("%s: install.d holds executables only, no folders", e.Path))
		}
	}
	if maxBytes > 0 && t.Size > maxBytes {
		errs = append(errs, fmt.Sprintf("the tree holds %d bytes; the limit is %d", t.Size, maxBytes))
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	sort.Strings(t.Install)
	return t, nil
}

// escapes reports whether a symlink at p with target could resolve
// outside the tree's root. Resolution is lexical, so a ".." that follows
// another symlink of the tree (whose real depth differs) counts as
// escaping: the rule is strict rather than clever.
func escapes(p, target string, isLink func(string) bool) bool {
	if target == "" || path.IsAbs(target) || strings.ContainsRune(target, 0) {
		return true
	}
	var at []string // the resolved path, from the root
	if dir := path.Dir(p); dir != "." {
		at = strings.Split(dir, "/")
	}
	throughLink := false
	for _, part := range strings.Split(target, "/") {
		switch part {
		case "", ".":
		case "..":
			if len(at) == 0 || throughLink {
				return true
			}
			at = at[:len(at)-1]
		default:
			at = append(at, part)
			if isLink(strings.Join(at, "/")) {
				throughLink = true
			}
		}
	}
	return false
}
