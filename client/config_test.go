package client

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClientConfigStrict: the CLI config refuses unknown fields and
// environments without an address.
func TestClientConfigStrict(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct{ body, want string }{
		{"current: dev\nenvironmnets: {}\n", "environmnets"},
		{"environments:\n  dev:\n    token: x\n", "has no address"},
	} {
		p := filepath.Join(dir, "c.yaml")
		os.WriteFile(p, []byte(tc.body), 0o600)
		if _, err := LoadConfig(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadConfig(%q) = %v, want an error mentioning %q", tc.body, err, tc.want)
		}
	}
	p := filepath.Join(dir, "ok.yaml")
	if err := SaveEnvironment(p, "dev", &Environment{Address: "127.0.0.1:7400", Token: "t"}, false); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(p)
	if err != nil || cfg.Current != "dev" || cfg.Environments["dev"].Token != "t" {
		t.Fatalf("round trip = %+v, %v", cfg, err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("config file mode = %v, want 0600 (it holds tokens)", st.Mode().Perm())
	}
}

// TestTargetResolve: flags and CORPUS_* variables override the chosen
// environment of the config file, flags first; FillFromEnv fills only
// what the flags left empty.
func TestTargetResolve(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config.yaml")
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, []byte("flag CA"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, e := range map[string]*Environment{
		"dev":  {Address: "10.0.0.1:7400", Token: "dev-token", CACert: "dev CA"},
		"prod": {Address: "10.0.0.2:7400", Token: "prod-token", CACert: "prod CA"},
	} {
		if err := SaveEnvironment(cfgFile, name, e, name == "dev"); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("CORPUS_ENV", "")
	t.Setenv("CORPUS_ADDR", "")
	t.Setenv("CORPUS_TOKEN", "")
	t.Setenv("CORPUS_CA_CERT", "")
	for _, tc := range []struct {
		name   string
		target Target
		env    map[string]string
		want   Environment
	}{
		{"the current environment", Target{}, nil, Environment{Address: "10.0.0.1:7400", Token: "dev-token", CACert: "dev CA"}},
		{"CORPUS_ENV picks another", Target{}, map[string]string{"CORPUS_ENV": "prod"},
			Environment{Address: "10.0.0.2:7400", Token: "prod-token", CACert: "prod CA"}},
		{"--env over CORPUS_ENV", Target{Env: "dev"}, map[string]string{"CORPUS_ENV": "prod"},
			Environment{Address: "10.0.0.1:7400", Token: "dev-token", CACert: "dev CA"}},
		{"CORPUS_TOKEN and CORPUS_ADDR override the file", Target{}, map[string]string{"CORPUS_TOKEN": "env-token", "CORPUS_ADDR": "127.0.0.1:1"},
			Environment{Address: "127.0.0.1:1", Token: "env-token", CACert: "dev CA"}},
		{"--token over CORPUS_TOKEN", Target{Token: "flag-token"}, map[string]string{"CORPUS_TOKEN": "env-token"},
			Environment{Address: "10.0.0.1:7400", Token: "flag-token", CACert: "dev CA"}},
		{"CORPUS_CA_CERT reads the file", Target{}, map[string]string{"CORPUS_CA_CERT": caFile},
			Environment{Address: "10.0.0.1:7400", Token: "dev-token", CACert: "flag CA"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			tg := tc.target
			tg.ConfigFile = cfgFile
			tg.FillFromEnv()
			got, err := tg.Resolve()
			if err != nil || got != tc.want {
				t.Errorf("Resolve() = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	tg := Target{ConfigFile: cfgFile, Env: "staging"}
	if _, err := tg.Resolve(); err == nil || !strings.Contains(err.Error(), `environment "staging" is not in`) || !strings.Contains(err.Error(), "known: dev, prod") {
		t.Errorf("Resolve() of an unknown environment = %v, want an error naming the known ones", err)
	}
	tg = Target{ConfigFile: filepath.Join(dir, "none.yaml")}
	if _, err := tg.Resolve(); err == nil || !strings.Contains(err.Error(), "no coordinator configured") {
		t.Errorf("Resolve() with nothing configured = %v, want an error saying what to do", err)
	}
	t.Setenv("XDG_CONFIG_HOME", dir)
	tg = Target{}
	tg.FillFromEnv()
	if want := filepath.Join(dir, "corpus", "config.yaml"); tg.ConfigFile != want {
		t.Errorf("FillFromEnv() config file = %q, want %q", tg.ConfigFile, want)
	}
}
