package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"corpus/client"
	"corpus/coordinator"
	"corpus/coordinator/ldapauth"
	"corpus/internal/slapdtest"
)

// TestLoginLDAP: an operator adds an LDAP user; `corpus login --ldap`
// with the password on stdin stores a token that works as that user,
// and a wrong password stores nothing.
func TestLoginLDAP(t *testing.T) {
	t.Parallel()
	dir := slapdtest.Start(t, map[string]string{"alice": "wonderland"})
	c := startCoordinator(t, func(cfg *coordinator.Config) {
		cfg.LDAP = ldapauth.Config{URL: dir.URL, UserDN: slapdtest.UserDN}
	})
	c.want("user add alice --role viewer --auth ldap", "user alice (viewer, logs in with ldap) added")
	c.want("user list", "alice", "ldap")

	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	alice := &cliTarget{t: t, addr: c.addr, flags: []string{"--address", c.addr, "--ca-cert", c.caFile, "--config-file", cfgFile}}
	if _, err := alice.run("wrong\n", "login", "--ldap", "alice", "--password-stdin", "--as", "lab"); err == nil || !strings.Contains(describe(err), "wrong user name or password") {
		t.Errorf("login with a wrong password = %v, want it refused", err)
	}
	if cfg, err := client.LoadConfig(cfgFile); err != nil || len(cfg.Environments) != 0 {
		t.Errorf("after a refused login the config is %+v, %v; want it empty", cfg, err)
	}
	alice.wantErr("login --ldap alice --token cusr_x_y", "not both")
	if _, err := alice.run("", "login", "--ldap", "alice", "--password-stdin"); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("login with nothing on stdin = %v, want an empty password refused", err)
	}
	out, err := alice.run("wonderland\n", "login", "--ldap", "alice", "--password-stdin", "--as", "lab")
	if err != nil || !strings.Contains(out, "as user:alice; environment lab saved") {
		t.Fatalf("login --ldap alice = %q, %v; want success as user:alice", out, err)
	}
	// The stored environment works without --token.
	alice.flags = []string{"--config-file", cfgFile}
	alice.want("status", "user:alice")
	alice.want("user token list", "ldap login from 127.0.0.1")
	alice.wantErr("user add mallory --role ops", "may not call")
}

// TestLoginLDAPRefusesPlainHTTP: a password never goes over plain http.
func TestLoginLDAPRefusesPlainHTTP(t *testing.T) {
	t.Parallel()
	c := &cliTarget{t: t, flags: []string{"--address", "http://192.0.2.1:7400", "--config-file", filepath.Join(t.TempDir(), "config.yaml")}}
	if _, err := c.run("pw\n", "login", "--ldap", "alice", "--password-stdin"); err == nil || !strings.Contains(err.Error(), "refusing to send a password") {
		t.Errorf("login --ldap to http://192.0.2.1 = %v, want it refused before dialing", err)
	}
}
