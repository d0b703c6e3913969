package srctree

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	ok := []Entry{
		{Mode: "100644", Type: "blob", Path: "index.html", Size: 10},
		{Mode: "100755", Type: "blob", Path: ".corpus/install.d/20-b", Size: 1},
		{Mode: "100755", Type: "blob", Path: ".corpus/install.d/10-a", Size: 1},
		{Mode: "100755", Type: "blob", Path: ".corpus/notify", Size: 1},
		{Mode: "120000", Type: "blob", Path: "web/static", Target: "../assets"},
		{Mode: "120000", Type: "blob", Path: "a/b/c", Target: "../../index.html"},
	}
	tr, err := Check(ok, 0)
	if err != nil {
		t.Fatalf("Check(good) = %v", err)
	}
	if strings.Join(tr.Install, ",") != "10-a,20-b" || !tr.Hooks["notify"] || tr.Hooks["archive"] || tr.Size != 13 {
		t.Fatalf("tree = %+v", tr)
	}
	for _, tc := range []struct {
		name string
		e    []Entry
		want string
	}{
		{"absolute symlink", []Entry{{Mode: "120000", Path: "etc", Target: "/etc"}}, "points outside"},
		{"climbing symlink", []Entry{{Mode: "120000", Path: "x/up", Target: "../../etc"}}, "points outside"},
		{"through a symlink", []Entry{{Mode: "120000", Path: "here", Target: "."}, {Mode: "120000", Path: "out", Target: "here/.."}}, "out points outside"},
		{"step not executable", []Entry{{Mode: "100644", Path: ".corpus/install.d/10-x"}}, "not executable"},
		{"hook not executable", []Entry{{Mode: "100644", Path: ".corpus/rollback"}}, "not executable"},
		{"folder in install.d", []Entry{{Mode: "100755", Path: ".corpus/install.d/sub/x"}}, "executables only"},
		{"submodule", []Entry{{Mode: "160000", Type: "commit", Path: "vendor/lib"}}, "submodule"},
		{"too big", []Entry{{Mode: "100644", Path: "big", Size: 2 << 20}}, "limit"},
	} {
		if _, err := Check(tc.e, 1<<20); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Check = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}
