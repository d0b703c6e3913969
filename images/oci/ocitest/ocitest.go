// Package ocitest builds OCI images from files a test writes and serves
// them from go-containerregistry's registry (a real OCI distribution
// server) on a loopback port, for tests of what pulls and runs images.
// No image is downloaded from outside.
package ocitest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"corpus/internal/pki"
)

// File is one tar entry of a test layer. Typ is a tar type flag
// (regular file, or folder when Name ends in "/", when zero); Mode is
// 0644 or 0755 for folders when zero.
type File struct {
	Name, Body, Link string
	Typ              byte
	Mode             int64
	UID, GID         int
	Xattrs           map[string]string
	Major, Minor     int64
}

// Tar writes files as a tar, in order.
func Tar(t testing.TB, files ...File) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		typ := f.Typ
		if typ == 0 {
			typ = tar.TypeReg
			if strings.HasSuffix(f.Name, "/") {
				typ = tar.TypeDir
			}
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		hdr := &tar.Header{Name: f.Name, Typeflag: typ, Mode: mode, Uid: f.UID, Gid: f.GID, Linkname: f.Link,
			ModTime: time.Unix(1700000000, 0), Devmajor: f.Major, Devminor: f.Minor, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(f.Body))
		}
		for k, v := range f.Xattrs {
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := io.WriteString(tw, f.Body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Layer is a gzip-compressed layer of files.
func Layer(t testing.TB, files ...File) v1.Layer {
	t.Helper()
	b := Tar(t, files...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Image is a linux/amd64 image of layers (lowest first) with cfg.
func Image(t testing.TB, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// Registry serves go-containerregistry's OCI distribution server on a
// loopback port for the test's life. It returns the registry's
// host:port.
func Registry(t testing.TB, opts ...registry.Option) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return Serve(t, ln, opts...)
}

// Serve serves go-containerregistry's OCI distribution server on ln (a
// loopback port of a network namespace the test made, say) for the
// test's life. It returns ln's host:port.
func Serve(t testing.TB, ln net.Listener, opts ...registry.Option) string {
	t.Helper()
	return serve(t, ln, registry.New(append([]registry.Option{registry.Logger(log.New(io.Discard, "", 0))}, opts...)...))
}

// serve serves h on ln for the test's life and returns ln's host:port.
func serve(t testing.TB, ln net.Listener, h http.Handler) string {
	// Handshake errors (a client that does not trust a TLS registry,
	// on purpose) are the test's to report.
	srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

// TLSRegistry is a registry served over HTTPS by ServeTLS.
type TLSRegistry struct {
	// Host is its host:port.
	Host string
	// CA is the certificate (PEM) of the authority its certificate is
	// from, and ClientCert with ClientKey a client certificate that
	// authority issued.
	CA, ClientCert, ClientKey []byte
}

// Client is a TLS configuration that trusts the registry's authority
// and offers its client certificate (to push with).
func (r TLSRegistry) Client(t testing.TB) *tls.Config {
	t.Helper()
	pair, err := tls.X509KeyPair(r.ClientCert, r.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(r.CA)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
}

// ServeTLS serves the registry as Registry does, over HTTPS with a
// certificate for 127.0.0.1 from an authority of its own; with
// clientCerts it asks for a client certificate from that authority and
// refuses a connection without one.
func ServeTLS(t testing.TB, clientCerts bool) TLSRegistry {
	t.Helper()
	caPEM, caKey, err := pki.NewCA("ocitest")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(caPEM, caKey)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(id string, ips ...net.IP) (certPEM, keyPEM []byte) {
		certPEM, keyPEM, _, err := ca.IssueKeyPair(pki.Request{Role: pki.RoleNode, ID: id, IPs: ips, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return certPEM, keyPEM
	}
	server, err := tls.X509KeyPair(issue("registry", net.IPv4(127, 0, 0, 1)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{server}, MinVersion: tls.VersionTLS12}
	if clientCerts {
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, ca.Pool()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := TLSRegistry{CA: caPEM}
	r.ClientCert, r.ClientKey = issue("client")
	r.Host = serve(t, tls.NewListener(ln, cfg), registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	return r
}

// ServePrivate serves the registry as Serve does, behind HTTP basic
// authentication as user with password: a request without them, or
// with others, is answered 401 with a Basic challenge, as private
// registries answer.
func ServePrivate(t testing.TB, ln net.Listener, user, password string) string {
	t.Helper()
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	return serve(t, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="ocitest"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
}

// Push stores img in its registry as ref and returns its digest; opts
// reach the registry (a transport dialing into a namespace, say).
func Push(t testing.TB, ref string, img v1.Image, opts ...remote.Option) string {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, append([]remote.Option{remote.WithContext(context.Background())}, opts...)...); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// BusyboxLayer is a layer holding the host's static busybox as /bin/busybox
// with its applets' links in /bin, an /etc/passwd and /etc/group with
// root and app (1000:1000, home /home/app), and /tmp. It skips the
// test where the host has no static busybox (Debian's busybox-static).
func BusyboxLayer(t testing.TB) v1.Layer {
	t.Helper()
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skipf("skipping: no busybox on this host: %v", err)
	}
	files := []File{
		{Name: "bin/"},
		{Name: "bin/busybox", Body: string(bin), Mode: 0o755},
		{Name: "etc/"},
		{Name: "etc/passwd", Body: "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n"},
		{Name: "etc/group", Body: "root:x:0:\napp:x:1000:\n"},
		{Name: "home/app/", UID: 1000, GID: 1000},
		{Name: "root/", Mode: 0o700},
		{Name: "tmp/", Mode: 0o1777},
	}
	for _, applet := range []string{"sh", "cat", "echo", "env", "id", "ls", "pwd", "sleep", "httpd", "wget", "nc", "ps", "kill"} {
		files = append(files, File{Name: "bin/" + applet, Typ: tar.TypeSymlink, Link: "busybox"})
	}
	return Layer(t, files...)
}
