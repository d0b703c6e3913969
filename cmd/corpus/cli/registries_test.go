package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRegistryCommands: login reads the password from stdin (and
// refuses to go on without a terminal or --password-stdin), list shows
// who set which registry's credentials and never the password, in text
// and JSON, and logout is idempotent.
func TestRegistryCommands(t *testing.T) {
	c := startCoordinator(t)
	const pw = "registry-pw-planted"
	c.wantErr("registry login registry.example.test", "--username is required")
	c.wantErr("registry login registry.example.test -u ci", "--password-stdin")
	if out, err := c.run(pw+"\n", "registry", "login", "https://registry.example.test", "-u", "ci", "--password-stdin"); err == nil || !strings.Contains(describe(err), "without a scheme or a path") {
		t.Errorf("registry login https://... = %q, %v; want it refused", out, err)
	}
	out, err := c.run(pw+"\n", "registry", "login", "registry.example.test:5000", "-u", "ci", "--password-stdin")
	if err != nil || !strings.Contains(out, "registry registry.example.test:5000: credentials of ci set") {
		t.Fatalf("registry login = %q, %v", out, err)
	}
	out, err = c.run(pw+"\n", "registry", "login", "registry.example.test:5000", "-u", "ci", "--password-stdin")
	if err != nil || !strings.Contains(out, "set already; nothing changed") {
		t.Errorf("registry login again = %q, %v", out, err)
	}
	list := c.want("registry list", "HOST", "registry.example.test:5000", "ci", "ops")
	js, err := c.run("", "registry", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Registries []struct{ Host, Username string } `json:"registries"`
	}
	if err := json.Unmarshal([]byte(js), &got); err != nil || len(got.Registries) != 1 || got.Registries[0].Host != "registry.example.test:5000" {
		t.Errorf("registry list --json = %s (%v)", js, err)
	}
	if strings.Contains(list+js, pw) {
		t.Errorf("registry list shows the password:\n%s\n%s", list, js)
	}
	c.want("registry logout registry.example.test:5000", "credentials removed")
	c.want("registry logout registry.example.test:5000", "had no credentials; nothing changed")
	c.want("registry list", "no registry has credentials")
}
