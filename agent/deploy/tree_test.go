package deploy

import (
	"strings"
	"testing"
)

func TestCheckTree(t *testing.T) {
	ok := []treeEntry{
		{Mode: "100644", Type: "blob", Path: "index.html", Size: 10},
		{Mode: "100755", Type: "blob", Path: ".corpus/install.d/20-b", Size: 1},
		{Mode: "100755", Type: "blob", Path: ".corpus/install.d/10-a", Size: 1},
		{Mode: "100755", Type: "blob", Path: ".corpus/notify", Size: 1},
		{Mode: "120000", Type: "blob", Path: "web/static", Target: "../assets"},
		{Mode: "120000", Type: "blob", Path: "a/b/c", Target: "../../index.html"},
	}
	tr, err := checkTree(ok, 0)
	if err != nil {
		t.Fatalf("checkTree(good) = %v", err)
	}
	if strings.Join(tr.Install, ",") != "10-a,20-b" || !tr.Hooks["notify"] || tr.Hooks["archive"] || tr.Size != 13 {
		t.Fatalf("tree = %+v", tr)
	}
	for _, tc := range []struct {
		name string
		e    []treeEntry
		want string
	}{
		{"absolute symlink", []treeEntry{{Mode: "120000", Path: "etc", Target: "/etc"}}, "points outside"},
		{"climbing symlink", []treeEntry{{Mode: "120000", Path: "x/up", Target: "../../etc"}}, "points outside"},
		{"through a symlink", []treeEntry{{Mode: "120000", Path: "here", Target: "."}, {Mode: "120000", Path: "out", Target: "here/.."}}, "out points outside"},
		{"step not executable", []treeEntry{{Mode: "100644", Path: ".corpus/install.d/10-x"}}, "not executable"},
		{"hook not executable", []treeEntry{{Mode: "100644", Path: ".corpus/rollback"}}, "not executable"},
		{"folder in install.d", []treeEntry{{Mode: "100755", Path: ".corpus/install.d/sub/x"}}, "executables only"},
		{"submodule", []treeEntry{{Mode: "160000", Type: "commit", Path: "vendor/lib"}}, "submodule"},
		{"too big", []treeEntry{{Mode: "100644", Path: "big", Size: 2 << 20}}, "limit"},
	} {
		if _, err := checkTree(tc.e, 1<<20); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: checkTree = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestParseGitCommand(t *testing.T) {
	for _, tc := range []struct{ cmd, service, project, env string }{
		{"git-receive-pack 'hello'", "git-receive-pack", "hello", ""},
		{"git-receive-pack '/hello.git'", "git-receive-pack", "hello", ""},
		{"git-upload-pack 'hello/prod'", "git-upload-pack", "hello", "prod"},
		{"git receive-pack \"hello/\"", "git-receive-pack", "hello", ""},
	} {
		s, p, e, err := parseGitCommand(tc.cmd)
		if err != nil || s != tc.service || p != tc.project || e != tc.env {
			t.Errorf("parseGitCommand(%q) = %q %q %q %v", tc.cmd, s, p, e, err)
		}
	}
	for _, bad := range []string{"", "sh -c id", "git-receive-pack '../etc'", "git-receive-pack 'a;b'", "git-receive-pack 'hello/qa'", "git-upload-archive 'hello'", "git-receive-pack '-x'"} {
		if _, _, _, err := parseGitCommand(bad); err == nil {
			t.Errorf("parseGitCommand(%q) accepted", bad)
		}
	}
}
