package ldapauth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"corpus/coordinator/ldapauth"
	"corpus/internal/slapdtest"
	"corpus/internal/testrun"
)

// users of the test directory; "a,b" and "x*" need escaping in a DN and
// a filter.
var users = map[string]string{
	"alice": "wonderland",
	"bob":   "builder",
	"a,b":   "comma",
	"x*":    "star",
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	srv := slapdtest.Start(t, users)
	pwFile := filepath.Join(t.TempDir(), "bind-password")
	if err := os.WriteFile(pwFile, []byte(slapdtest.RootPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	configs := map[string]ldapauth.Config{
		"dn template":           {URL: srv.URL, UserDN: slapdtest.UserDN},
		"dn template, starttls": {URL: srv.URL, UserDN: slapdtest.UserDN, StartTLS: true, CAFile: srv.CAFile},
		"search": {URL: srv.URL, BaseDN: slapdtest.People, UserFilter: "(uid=%s)",
			BindDN: slapdtest.RootDN, BindPasswordFile: pwFile},
		"search, starttls": {URL: srv.URL, BaseDN: slapdtest.People, UserFilter: "(&(objectClass=inetOrgPerson)(uid=%s))",
			BindDN: slapdtest.RootDN, BindPasswordFile: pwFile, StartTLS: true, CAFile: srv.CAFile},
	}
	cases := []struct {
		user, password string
		want           error
	}{
		{"alice", "wonderland", nil},
		{"bob", "builder", nil},
		{"alice", "builder", ldapauth.ErrBadCredentials},
		{"alice", "", ldapauth.ErrBadCredentials}, // would be an unauthenticated bind
		{"nobody", "wonderland", ldapauth.ErrBadCredentials},
		// Escaped values name exactly the entry they spell.
		{"a,b", "comma", nil},
		{"x*", "star", nil},
		// Injection: unescaped, "*" matches every uid (and binds as the
		// first with its password), "alice)(uid=*" widens the filter,
		// and "alice,ou=people" would shift the DN.
		{"*", "wonderland", ldapauth.ErrBadCredentials},
		{"x*", "wonderland", ldapauth.ErrBadCredentials},
		{"alice)(uid=*", "wonderland", ldapauth.ErrBadCredentials},
		{"*)(|(uid=*", "wonderland", ldapauth.ErrBadCredentials},
		{"alice,ou=people", "wonderland", ldapauth.ErrBadCredentials},
		{"alice\x00", "wonderland", ldapauth.ErrBadCredentials},
	}
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d, err := ldapauth.New(cfg)
			if err != nil {
				t.Fatalf("New(%+v) = %v", cfg, err)
			}
			for _, c := range cases {
				err := d.Authenticate(context.Background(), c.user, c.password)
				if (c.want == nil && err != nil) || (c.want != nil && !errors.Is(err, c.want)) {
					t.Errorf("Authenticate(%q, %q) = %v, want %v", c.user, c.password, err, c.want)
				}
			}
		})
	}
}

// TestAuthenticateUnavailable: a directory that is down, that presents
// a certificate from another CA, or whose search account is refused is
// ErrUnavailable, never a success.
func TestAuthenticateUnavailable(t *testing.T) {
	t.Parallel()
	srv := slapdtest.Start(t, users)
	other := slapdtest.Start(t, users)
	wrongPW := filepath.Join(t.TempDir(), "bind-password")
	if err := os.WriteFile(wrongPW, []byte("wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	down := slapdtest.Start(t, users)
	downURL := down.URL
	down.Stop()
	for name, cfg := range map[string]ldapauth.Config{
		"down":                   {URL: downURL, UserDN: slapdtest.UserDN},
		"starttls, another ca":   {URL: srv.URL, UserDN: slapdtest.UserDN, StartTLS: true, CAFile: other.CAFile},
		"search account refused": {URL: srv.URL, BaseDN: slapdtest.People, UserFilter: "(uid=%s)", BindDN: slapdtest.RootDN, BindPasswordFile: wrongPW},
	} {
		t.Run(name, func(t *testing.T) {
			d, err := ldapauth.New(cfg)
			if err != nil {
				t.Fatalf("New(%+v) = %v", cfg, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testrun.D(10*time.Second))
			defer cancel()
			if err := d.Authenticate(ctx, "alice", "wonderland"); !errors.Is(err, ldapauth.ErrUnavailable) {
				t.Errorf("Authenticate(alice) = %v, want %v", err, ldapauth.ErrUnavailable)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg ldapauth.Config
		ok  bool
	}{
		{ldapauth.Config{URL: "ldap://127.0.0.1:389", UserDN: "uid=%s,dc=x"}, true},
		{ldapauth.Config{URL: "ldaps://ldap.example.org", UserDN: "uid=%s,dc=x"}, true},
		{ldapauth.Config{URL: "ldap://h:389", BaseDN: "dc=x", UserFilter: "(uid=%s)", BindDN: "cn=r,dc=x", BindPasswordFile: "/f"}, true},
		{ldapauth.Config{URL: "http://h", UserDN: "uid=%s,dc=x"}, false},
		{ldapauth.Config{URL: "ldap://h", UserDN: "uid=x,dc=x"}, false},
		{ldapauth.Config{URL: "ldap://h", UserDN: "uid=%s,cn=%s"}, false},
		{ldapauth.Config{URL: "ldap://h", UserDN: "uid=%d%s"}, false},
		{ldapauth.Config{URL: "ldap://h", UserDN: "not a dn %s"}, false},
		{ldapauth.Config{URL: "ldaps://h", UserDN: "uid=%s,dc=x", StartTLS: true}, false},
		{ldapauth.Config{URL: "ldap://h", BaseDN: "dc=x", UserFilter: "(uid=%s)"}, false},
		{ldapauth.Config{URL: "ldap://h", BaseDN: "dc=x", UserFilter: "uid=%s(", BindDN: "cn=r", BindPasswordFile: "/f"}, false},
		{ldapauth.Config{URL: "ldap://h", UserDN: "uid=%s,dc=x", BaseDN: "dc=x"}, false},
		{ldapauth.Config{URL: "ldap://h"}, false},
	} {
		if err := c.cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("Validate(%+v) = %v, want ok %t", c.cfg, err, c.ok)
		}
	}
}
