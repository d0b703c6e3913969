// Package ldapauth checks users' passwords by binding to an LDAP
// directory as them.
//
// Two ways find a user's entry: a DN template ("uid=%s,ou=people,
// dc=example,dc=org", the user name escaped as an RFC 4514 attribute
// value), or search-then-bind, where a service account searches BaseDN
// with a filter ("(uid=%s)", the name escaped as an RFC 4515 filter
// value) for exactly one entry. Either way the user's own password must
// bind as that entry. The connection is plain ldap://, ldap:// upgraded
// with StartTLS, or ldaps://; TLS verifies the server against CAFile (or
// the system roots).
package ldapauth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-ldap/ldap/v3"
)

// Config says where the directory is and how users are found in it. A
// zero URL turns LDAP off.
type Config struct {
	// URL is ldap://HOST:PORT or ldaps://HOST:PORT.
	URL string
	// UserDN is the bind DN of a user with one %s for the user name.
	UserDN string
	// BaseDN and UserFilter (one %s for the name) find users by search,
	// bound as BindDN with the password in BindPasswordFile; used when
	// UserDN is empty.
	BaseDN           string
	UserFilter       string
	BindDN           string
	BindPasswordFile string
	// StartTLS upgrades an ldap:// connection to TLS before binding.
	StartTLS bool
	// CAFile holds the PEM certificates that sign the directory's TLS
	// certificate (default: the system roots).
	CAFile string
	// Timeout bounds dialing and each LDAP operation.
	Timeout time.Duration
}

// DefaultTimeout is the default Config.Timeout.
const DefaultTimeout = 5 * time.Second

// Enabled reports whether LDAP is configured.
func (c Config) Enabled() bool { return c.URL != "" }

// Validate checks a configuration that is enabled.
func (c Config) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "ldap" && u.Scheme != "ldaps") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("ldap url %q: want ldap://HOST:PORT or ldaps://HOST:PORT", c.URL)
	}
	if c.StartTLS && u.Scheme == "ldaps" {
		return errors.New("ldap: StartTLS is for ldap:// URLs; ldaps:// is TLS already")
	}
	switch {
	case c.UserDN != "" && c.BaseDN != "":
		return errors.New("ldap: give a user DN template or a base DN to search, not both")
	case c.UserDN != "":
		if strings.Count(c.UserDN, "%s") != 1 || strings.Count(c.UserDN, "%") != 1 {
			return fmt.Errorf("ldap user DN %q: want exactly one %%s where the user name goes, e.g. uid=%%s,ou=people,dc=example,dc=org", c.UserDN)
		}
		if _, err := ldap.ParseDN(fmt.Sprintf(c.UserDN, "x")); err != nil {
			return fmt.Errorf("ldap user DN %q: %w", c.UserDN, err)
		}
	case c.BaseDN != "":
		if strings.Count(c.UserFilter, "%s") != 1 || strings.Count(c.UserFilter, "%") != 1 {
			return fmt.Errorf("ldap user filter %q: want exactly one %%s where the user name goes, e.g. (uid=%%s)", c.UserFilter)
		}
		if _, err := ldap.CompileFilter(fmt.Sprintf(c.UserFilter, "x")); err != nil {
			return fmt.Errorf("ldap user filter %q: %w", c.UserFilter, err)
		}
		if c.BindDN == "" || c.BindPasswordFile == "" {
			return errors.New("ldap: searching for users needs a bind DN and a bind password file")
		}
	default:
		return errors.New("ldap: give a user DN template (uid=%s,ou=people,...) or a base DN and filter to search")
	}
	if c.Timeout < 0 {
		return fmt.Errorf("ldap timeout %s is negative", c.Timeout)
	}
	return nil
}

// Errors of Authenticate.
var (
	// ErrBadCredentials: no such entry, or the password is wrong.
	ErrBadCredentials = errors.New("wrong user name or password")
	// ErrUnavailable: the directory could not be asked (down, TLS
	// failure, timeout, the search account refused).
	ErrUnavailable = errors.New("directory unavailable")
)

// Directory authenticates users against one LDAP server.
type Directory struct {
	cfg     Config
	tls     *tls.Config
	bindPW  string
	timeout time.Duration
}

// New checks cfg and loads its files.
func New(cfg Config) (*Directory, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Directory{cfg: cfg, timeout: cfg.Timeout}
	if d.timeout == 0 {
		d.timeout = DefaultTimeout
	}
	u, _ := url.Parse(cfg.URL)
	d.tls = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ldap ca file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ldap ca file %s: no PEM certificate in it", cfg.CAFile)
		}
		d.tls.RootCAs = pool
	}
	if cfg.BindPasswordFile != "" {
		pw, err := os.ReadFile(cfg.BindPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("ldap bind password file: %w", err)
		}
		d.bindPW = strings.TrimRight(string(pw), "\r\n")
		if d.bindPW == "" {
			return nil, fmt.Errorf("ldap bind password file %s is empty", cfg.BindPasswordFile)
		}
	}
	return d, nil
}

// Authenticate binds as user with password. It returns nil when the
// directory accepts them, an error wrapping ErrBadCredentials when it
// does not, and one wrapping ErrUnavailable when it could not be asked.
// An empty password is refused without asking: to LDAP it would be an
// unauthenticated bind, which succeeds.
func (d *Directory) Authenticate(ctx context.Context, user, password string) error {
	if user == "" || password == "" {
		return fmt.Errorf("empty user name or password: %w", ErrBadCredentials)
	}
	conn, err := d.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	dn := ""
	if d.cfg.UserDN != "" {
		dn = fmt.Sprintf(d.cfg.UserDN, ldap.EscapeDN(user))
	} else if dn, err = d.search(conn, user); err != nil {
		return err
	}
	if err := conn.Bind(dn, password); err != nil {
		if ldap.IsErrorWithCode(err, ldap.LDAPResultInvalidCredentials) {
			return fmt.Errorf("binding as %s: %w", dn, ErrBadCredentials)
		}
		return fmt.Errorf("binding as %s: %w: %v", dn, ErrUnavailable, err)
	}
	return nil
}

// dial connects and, with StartTLS, upgrades the connection.
func (d *Directory) dial(ctx context.Context) (*ldap.Conn, error) {
	dialer := &net.Dialer{Timeout: d.timeout}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d.timeout {
		dialer.Deadline = dl
	}
	conn, err := ldap.DialURL(d.cfg.URL, ldap.DialWithDialer(dialer), ldap.DialWithTLSConfig(d.tls))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w: %v", d.cfg.URL, ErrUnavailable, err)
	}
	conn.SetTimeout(d.timeout)
	if d.cfg.StartTLS {
		if err := conn.StartTLS(d.tls); err != nil {
			conn.Close()
			return nil, fmt.Errorf("starting TLS with %s: %w: %v", d.cfg.URL, ErrUnavailable, err)
		}
	}
	return conn, nil
}

// search finds the one entry of user, bound as the service account.
func (d *Directory) search(conn *ldap.Conn, user string) (string, error) {
	if err := conn.Bind(d.cfg.BindDN, d.bindPW); err != nil {
		return "", fmt.Errorf("binding as the search account %s: %w: %v", d.cfg.BindDN, ErrUnavailable, err)
	}
	req := ldap.NewSearchRequest(d.cfg.BaseDN, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases,
		2, int(d.timeout/time.Second), false,
		fmt.Sprintf(d.cfg.UserFilter, ldap.EscapeFilter(user)), []string{"dn"}, nil)
	res, err := conn.Search(req)
	if res == nil || (err != nil && !ldap.IsErrorWithCode(err, ldap.LDAPResultSizeLimitExceeded)) {
		return "", fmt.Errorf("searching for %s: %w: %v", user, ErrUnavailable, err)
	}
	switch n := len(res.Entries); {
	case n == 0:
		return "", fmt.Errorf("no entry for %s under %s: %w", user, d.cfg.BaseDN, ErrBadCredentials)
	case n > 1:
		return "", fmt.Errorf("more than one entry for %s under %s: %w", user, d.cfg.BaseDN, ErrBadCredentials)
	}
	return res.Entries[0].DN, nil
}
