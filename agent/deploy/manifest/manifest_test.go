package manifest

import (
	"strings"
	"testing"
	"time"
)

func TestParseManifest(t *testing.T) {
	m, err := Parse(nil)
	if err != nil || m.Keep != defaultKeep || m.Timeout != DefaultStepTimeout || m.Health != nil {
		t.Fatalf("empty manifest = %+v, %v; want defaults", m, err)
	}
	m, err = Parse([]byte("keep: 3\ntimeout: 90s\nuser: www-data\nenv: {A: b}\nhealth:\n  http: {port: 8080}\ndomains: [' WWW.Example.Test. ']\n"))
	if err != nil || m.Keep != 3 || len(m.Domains) != 1 || m.Domains[0] != "www.example.test" || m.Timeout != 90*time.Second || m.User != "www-data" || m.Env["A"] != "b" ||
		m.Health.HTTP.Path != "/" || m.Health.HTTP.Timeout != DefaultHealthTimeout {
		t.Fatalf("manifest = %+v, %v", m, err)
	}
	m, err = Parse([]byte("deploy: {strategy: blue-green, keep: 30m}\n"))
	if s, keep := m.Strategy("", 0); err != nil || s != StrategyBlueGreen || keep != 1800 {
		t.Errorf("deploy policy = %q %d, %v", s, keep, err)
	}
	if s, keep := m.Strategy("rolling", 0); s != "rolling" || keep != 0 {
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
		if m, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", bad, m)
		}
	}
}

func TestProcfile(t *testing.T) {
	procs, err := ParseProcfile([]byte("# the app\nweb: gunicorn app:app -b :$PORT\r\n\nworker:python worker.py  \n"))
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
		if _, err := ParseProcfile([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Procfile %q: err = %v, want %q", in, err, want)
		}
	}
	m, err := Parse([]byte("processes:\n  web: httpd -f -p $PORT\n  clock: ./clock\ngrace: 3s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.ProcessOrder(); strings.Join(got, ",") != "web,clock" || m.Grace.String() != "3s" {
		t.Fatalf("order = %v, grace %s", got, m.Grace)
	}
	if m, _ := Parse(nil); m.Grace != defaultGrace || len(m.Processes) != 0 {
		t.Fatalf("defaults: %+v", m)
	}
	for in, want := range map[string]string{
		"processes:\n  web: \"\"\n":      "process web has no command",
		"processes:\n  Web: x\n":         "process name \"Web\"",
		"processes:\n  web: \"a\\nb\"\n": "NUL or newline",
		"grace: 10m\n":                   "grace 10m0s",
	} {
		if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("manifest %q: err = %v, want %q", in, err, want)
		}
	}
}
