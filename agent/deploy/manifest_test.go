package deploy

import (
	"strings"
	"testing"
	"time"
)

func TestParseManifest(t *testing.T) {
	m, err := parseManifest(nil)
	if err != nil || m.Keep != defaultKeep || m.Timeout != defaultStepTimeout || m.Health != nil {
		t.Fatalf("empty manifest = %+v, %v; want defaults", m, err)
	}
	m, err = parseManifest([]byte("keep: 3\ntimeout: 90s\nuser: www-data\nenv: {A: b}\nhealth:\n  http: {port: 8080}\ndomains: [' WWW.Example.Test. ']\n"))
	if err != nil || m.Keep != 3 || len(m.Domains) != 1 || m.Domains[0] != "www.example.test" || m.Timeout != 90*time.Second || m.User != "www-data" || m.Env["A"] != "b" ||
		m.Health.HTTP.Path != "/" || m.Health.HTTP.Timeout != defaultHealthTimeout {
		t.Fatalf("manifest = %+v, %v", m, err)
	}
	m, err = parseManifest([]byte("deploy: {strategy: blue-green, keep: 30m}\n"))
	if s, keep := m.strategy("", 0); err != nil || s != strategyBlueGreen || keep != 1800 {
		t.Errorf("deploy policy = %q %d, %v", s, keep, err)
	}
	if s, keep := m.strategy("rolling", 0); s != "rolling" || keep != 0 {
		t.Errorf("an asked strategy = %q %d; want it over the manifest's", s, keep)
	}
	for _, bad := range []string{
		"deploy: {strategy: canary}",
		"deploy: {strategy: rolling, keep: 1m}",
		"deploy: {strategy: blue-green, keep: 800h}",
		"keeep: 3",
		"keep: 0\nkeep: -1",
		"keep: 1000",
		"timeout: 1ms",
		"user: 'root; rm -rf /'",
		"env: {CORPUS_RELEASE: x}",
		"env: {'A B': x}",
		"health: {http: {port: 0}}",
		"health: {http: {port: 80, path: 'no-slash'}}",
		"[not a map]",
		"domains: ['bad domain']",
	} {
		if m, err := parseManifest([]byte(bad)); err == nil {
			t.Errorf("parseManifest(%q) = %+v, want an error", bad, m)
		}
	}
}

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

func TestProcfile(t *testing.T) {
	procs, err := parseProcfile([]byte("# the app\nweb: gunicorn app:app -b :$PORT\r\n\nworker:python worker.py  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if procs["web"] != "gunicorn app:app -b :$PORT" || procs["worker"] != "python worker.py" || len(procs) != 2 {
		t.Fatalf("procs = %q", procs)
	}
	for in, want := range map[string]string{
		"web gunicorn\n":   "Procfile line 1",
		"\nWeb: x\n":       "line 2: process name \"Web\"",
		"web: a\nweb: b\n": "line 2: process web is declared twice",
		"web:\n":           "line 1: process web has no command",
		"1web: x\n":        "process name \"1web\"",
		"a-very-long-process-name-over-32-chars: x\n": "process name",
	} {
		if _, err := parseProcfile([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Procfile %q: err = %v, want %q", in, err, want)
		}
	}
	m, err := parseManifest([]byte("processes:\n  web: httpd -f -p $PORT\n  clock: ./clock\ngrace: 3s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.processOrder(); strings.Join(got, ",") != "web,clock" || m.Grace.String() != "3s" {
		t.Fatalf("order = %v, grace %s", got, m.Grace)
	}
	if m, _ := parseManifest(nil); m.Grace != defaultGrace || len(m.Processes) != 0 {
		t.Fatalf("defaults: %+v", m)
	}
	for in, want := range map[string]string{
		"processes:\n  web: \"\"\n":      "process web has no command",
		"processes:\n  Web: x\n":         "process name \"Web\"",
		"processes:\n  web: \"a\\nb\"\n": "NUL or newline",
		"grace: 10m\n":                   "grace 10m0s",
	} {
		if _, err := parseManifest([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("manifest %q: err = %v, want %q", in, err, want)
		}
	}
}
