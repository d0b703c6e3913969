// Package slapdtest runs a real OpenLDAP slapd (Debian's slapd package)
// for tests: its own config and mdb database in a temporary folder, on a
// dynamic loopback port, with StartTLS offered under a certificate signed
// by a CA the test trusts. It is stopped by PID when the test ends.
package slapdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// Directory layout every server holds.
const (
	Suffix = "dc=example,dc=org"
	People = "ou=people," + Suffix
	// UserDN is the bind DN template of a user: fmt it with the uid.
	UserDN = "uid=%s," + People
	// RootDN and RootPassword are the directory manager, usable as the
	// search account of search-then-bind.
	RootDN       = "cn=admin," + Suffix
	RootPassword = "manager-secret"
)

// Server is a running slapd.
type Server struct {
	// URL is ldap://127.0.0.1:PORT.
	URL string
	// CAFile is the PEM certificate of the CA that signed the server's
	// StartTLS certificate (for 127.0.0.1).
	CAFile string
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

const slapdBin = "/usr/sbin/slapd"

// Start runs slapd with one entry uid=NAME,ou=people,dc=example,dc=org
// per user (password as given); it skips the test when slapd is not
// installed, and stops slapd when the test ends.
func Start(t testing.TB, users map[string]string) *Server {
	t.Helper()
	for _, bin := range []string{slapdBin, "/usr/sbin/slapadd"} {
		if _, err := os.Stat(bin); err != nil {
			t.Skipf("%s is not installed: apt-get install slapd ldap-utils (scripts/setup installs them)", bin)
		}
	}
	dir := t.TempDir()
	s := &Server{dir: dir, CAFile: filepath.Join(dir, "ca.pem")}
	if err := writeCerts(dir); err != nil {
		t.Fatalf("slapd certificates: %v", err)
	}
	conf := filepath.Join(dir, "slapd.conf")
	if err := os.WriteFile(conf, []byte(config(dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "db"), 0o700); err != nil {
		t.Fatal(err)
	}
	ldif := filepath.Join(dir, "data.ldif")
	if err := os.WriteFile(ldif, []byte(entries(users)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("/usr/sbin/slapadd", "-f", conf, "-l", ldif).CombinedOutput(); err != nil {
		t.Fatalf("slapadd: %v: %s", err, out)
	}
	var last error
	for range 5 {
		if last = s.run(conf); last == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("starting slapd: %v", last)
	return nil
}

// run starts slapd in the foreground on a free port and waits until it
// accepts connections.
func (s *Server) run(conf string) error {
	port, err := testrun.FreePortErr()
	if err != nil {
		return err
	}
	s.URL = fmt.Sprintf("ldap://127.0.0.1:%d", port)
	log, err := os.Create(filepath.Join(s.dir, "slapd.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	// -d 0 keeps slapd in the foreground, so it is this process's child.
	s.cmd = exec.Command(slapdBin, "-f", conf, "-h", s.URL+"/", "-d", "0")
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("running slapd: %w", err)
	}
	s.exited = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.exited) }()
	addr := s.Addr()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-s.exited:
			out, _ := os.ReadFile(log.Name())
			return fmt.Errorf("slapd on %s exited: %s", addr, out)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
	}
	s.Stop()
	return fmt.Errorf("slapd did not listen on %s within 10s", addr)
}

// Addr is slapd's host:port.
func (s *Server) Addr() string { return strings.TrimPrefix(s.URL, "ldap://") }

// Stop ends slapd (by its PID) and waits for it; calling it again does
// nothing.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

func config(dir string) string {
	return fmt.Sprintf(`include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
pidfile %[1]s/slapd.pid
argsfile %[1]s/slapd.args
TLSCACertificateFile %[1]s/ca.pem
TLSCertificateFile %[1]s/server.pem
TLSCertificateKeyFile %[1]s/server.key
modulepath /usr/lib/ldap
moduleload back_mdb
database mdb
maxsize 16777216
suffix "%[2]s"
rootdn "%[3]s"
rootpw %[4]s
directory %[1]s/db
access to attrs=userPassword by anonymous auth by * none
access to * by * read
`, dir, Suffix, RootDN, RootPassword)
}

// entries is the LDIF of the directory: the suffix, ou=people and one
// inetOrgPerson per user.
func entries(users map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "dn: %s\nobjectClass: dcObject\nobjectClass: organization\no: example\ndc: example\n\n", Suffix)
	fmt.Fprintf(&b, "dn: %s\nobjectClass: organizationalUnit\nou: people\n\n", People)
	for name, pw := range users {
		// base64 values (::) carry any byte of a uid or password.
		fmt.Fprintf(&b, "dn:: %s\nobjectClass: inetOrgPerson\nuid:: %s\ncn:: %s\nsn: user\nuserPassword:: %s\n\n",
			b64("uid="+escapeRDN(name)+","+People), b64(name), b64(name), b64(pw))
	}
	return b.String()
}

// escapeRDN escapes an attribute value for a DN (RFC 4514), the few
// characters the test entries use.
func escapeRDN(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `,`, `\,`, `+`, `\+`, `"`, `\"`, `<`, `\<`, `>`, `\>`, `;`, `\;`, `=`, `\=`)
	v = r.Replace(v)
	if strings.HasPrefix(v, "#") || strings.HasPrefix(v, " ") {
		v = `\` + v
	}
	return v
}

// writeCerts makes a CA and a server certificate for 127.0.0.1.
func writeCerts(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "slapdtest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	for name, blk := range map[string]*pem.Block{
		"ca.pem":     {Type: "CERTIFICATE", Bytes: caDER},
		"server.pem": {Type: "CERTIFICATE", Bytes: leafDER},
		"server.key": {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(blk), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
