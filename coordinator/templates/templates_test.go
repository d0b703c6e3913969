package templates

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBuiltin(t *testing.T) {
	set, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"postgresql", "mariadb", "redis"} {
		tpl := set[name]
		if tpl == nil {
			t.Fatalf("built-in template %s is missing", name)
		}
		for _, f := range []string{"setup", "start", "health", "backup", "restore"} {
			if len(tpl.Files[f]) == 0 {
				t.Errorf("%s has no %s script", name, f)
			}
		}
		if tpl.Source != "builtin" || len(tpl.Digest) != 64 || tpl.Port == 0 || len(tpl.Versions) == 0 {
			t.Errorf("%s = source %q, digest %q, port %d, versions %v", name, tpl.Source, tpl.Digest, tpl.Port, tpl.Versions)
		}
		if tpl.LinkEnv["URL"] == "" {
			t.Errorf("%s gives no URL to a link", name)
		}
	}
	pg := set["postgresql"]
	if got := Packages(pg, "15"); len(got) != 1 || got[0] != "postgresql-15" {
		t.Errorf("postgresql's packages for 15 = %v", got)
	}
	env := LinkEnv(pg, "DATABASE", map[string]string{"host": "db.corpus.internal", "port": "5432", "PASSWORD": "s3cret"})
	if want := "postgres://corpus:s3cret@db.corpus.internal:5432/corpus"; env["DATABASE_URL"] != want {
		t.Errorf("DATABASE_URL = %q, want %q", env["DATABASE_URL"], want)
	}
	if env["DATABASE_PASSWORD"] != "s3cret" || env["DATABASE_HOST"] != "db.corpus.internal" {
		t.Errorf("link env = %v", env)
	}
	if !set["redis"].RestoreOffline || pg.RestoreOffline {
		t.Error("redis restores offline, postgresql online")
	}
}

// writeTemplate makes a template folder under dir from a service.yaml and
// the required scripts.
func writeTemplate(t *testing.T, dir, name, yaml string) {
	t.Helper()
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"service.yaml": yaml, "setup": "true\n", "start": "exec sleep 1000\n", "health": "true\n"}
	for f, body := range files {
		if err := os.WriteFile(filepath.Join(d, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const good = `name: %s
versions: ["1"]
image: debian/bookworm
port: 8080
volume: {path: /srv/data}
credentials: [TOKEN]
link: {URL: "http://{host}:{port}/?t={TOKEN}"}
`

func TestOperatorFolder(t *testing.T) {
	dir := t.TempDir()
	writeTemplate(t, dir, "kv", strings.ReplaceAll(good, "%s", "kv"))
	writeTemplate(t, dir, "redis", strings.ReplaceAll(good, "%s", "redis"))
	set, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if set["kv"] == nil || set["kv"].Source != dir || set["kv"].DefaultVolumeBytes != 1<<30 {
		t.Errorf("the operator's template kv = %v", set["kv"])
	}
	if set["redis"].Source != dir || set["redis"].Port != 8080 {
		t.Errorf("the operator's redis did not replace the built-in one: %v", set["redis"])
	}
	if set["postgresql"] == nil {
		t.Error("the built-in templates are gone")
	}
	if set, err := Load(filepath.Join(dir, "missing")); err != nil || len(set) != 3 {
		t.Errorf("Load(a missing folder) = %d templates, %v; want the built-in ones", len(set), err)
	}
}

func TestBadTemplates(t *testing.T) {
	cases := map[string]string{
		"name differs":        strings.ReplaceAll(good, "name: %s", "name: other"),
		"no versions":         strings.ReplaceAll(good, `versions: ["1"]`, "versions: []"),
		"no port":             strings.ReplaceAll(good, "port: 8080", "port: 0"),
		"relative volume":     strings.ReplaceAll(good, "/srv/data", "data"),
		"unknown field":       good + "colour: blue\n",
		"unknown placeholder": strings.ReplaceAll(good, "{TOKEN}", "{SECRET}"),
		"bad size":            good + "memory: {min: lots}\n",
		"default below min":   good + "memory: {min: 1G, default: 512M}\n",
		"bad credential":      strings.ReplaceAll(good, "[TOKEN]", "[token]"),
		"bad interval":        good + "health: {interval: often}\n",
		"bad restore mode":    good + "backup: {restore: sometimes}\n",
		"bad package":         good + "packages: [\"pkg-{name}\"]\n",
	}
	for what, yaml := range cases {
		t.Run(what, func(t *testing.T) {
			dir := t.TempDir()
			writeTemplate(t, dir, "x", strings.ReplaceAll(yaml, "%s", "x"))
			if _, err := Load(dir); !errors.Is(err, ErrInvalid) {
				t.Errorf("Load = %v, want ErrInvalid", err)
			}
		})
	}
	t.Run("missing script", func(t *testing.T) {
		dir := t.TempDir()
		writeTemplate(t, dir, "x", strings.ReplaceAll(good, "%s", "x"))
		os.Remove(filepath.Join(dir, "x", "health"))
		if _, err := Load(dir); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "health") {
			t.Errorf("Load = %v, want ErrInvalid naming health", err)
		}
	})
}
