package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"golang.org/x/sys/unix"

	"corpus/images/oci/ocitest"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("unpacking keeps owners and set-id bits: needs root")
	}
}

// base is the lowest layer of the test images.
func base(t *testing.T) v1.Layer {
	return ocitest.Layer(t,
		ocitest.File{Name: "bin/"},
		ocitest.File{Name: "bin/app", Body: "#!/bin/sh\n", Mode: 0o755},
		ocitest.File{Name: "bin/tool", Body: "tool", Mode: 0o4755},
		ocitest.File{Name: "bin/hard", Typ: tar.TypeLink, Link: "bin/tool"},
		ocitest.File{Name: "etc/"},
		ocitest.File{Name: "etc/passwd", Body: "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n"},
		ocitest.File{Name: "etc/motd", Body: "one\n"},
		ocitest.File{Name: "home/app/", UID: 1000, GID: 1000, Mode: 0o750},
		ocitest.File{Name: "home/app/notes", Body: "mine", UID: 1000, GID: 1000, Xattrs: map[string]string{"user.origin": "test", "trusted.overlay.opaque": "y"}},
		ocitest.File{Name: "usr/lib/libfoo", Body: "foo"},
		ocitest.File{Name: "lib", Typ: tar.TypeSymlink, Link: "usr/lib"},
		ocitest.File{Name: "data/old/a", Body: "a"},
		ocitest.File{Name: "data/keep", Body: "k"},
		ocitest.File{Name: "gone/deep/file", Body: "x"},
		ocitest.File{Name: "shared", Body: "s"},
		ocitest.File{Name: "srv/", Mode: 0o2775},
	)
}

// TestPullUnpack pulls a three-layer image from a registry and checks
// what unpacking made of each rule: whiteouts, an opaque folder (with an
// entry of its own layer before the marker), hard links, set-id bits,
// owners, xattrs, symlinks followed inside the tree.
func TestPullUnpack(t *testing.T) {
	needRoot(t)
	t.Parallel()
	reg := ocitest.Registry(t)
	cfg := v1.Config{
		Entrypoint:   []string{"/bin/app", "--flag"},
		Cmd:          []string{"serve"},
		Env:          []string{"PATH=/bin", "GREETING=hello world"},
		WorkingDir:   "/home/app",
		User:         "app",
		ExposedPorts: map[string]struct{}{"8080/tcp": {}},
		StopSignal:   "SIGINT",
	}
	img := ocitest.Image(t, cfg, base(t),
		ocitest.Layer(t,
			ocitest.File{Name: ".wh.gone"},
			ocitest.File{Name: "data/new", Body: "n"},
			ocitest.File{Name: "data/.wh..wh..opq"},
			ocitest.File{Name: "etc/.wh.motd"},
		),
		ocitest.Layer(t,
			ocitest.File{Name: "etc/motd", Body: "three\n"},
			ocitest.File{Name: "lib/added", Body: "through the symlink"},
			ocitest.File{Name: "shared", Body: "replaced"},
		))
	digest := ocitest.Push(t, reg+"/test/app:1", img)

	s := &Store{Root: t.TempDir()}
	var progress []string
	got, err := s.Pull(context.Background(), reg+"/test/app:1", func(m string) { progress = append(progress, m) })
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != digest {
		t.Errorf("Pull().Digest = %s, want %s", got.Digest, digest)
	}
	if len(got.Layers) != 3 || len(progress) != 3 {
		t.Errorf("Pull() = %d layers, %d progress lines, want 3 and 3", len(got.Layers), len(progress))
	}
	if !slices.Equal(got.Config.Entrypoint, cfg.Entrypoint) || !slices.Equal(got.Config.Cmd, cfg.Cmd) ||
		!slices.Equal(got.Config.Env, cfg.Env) || got.Config.User != "app" || got.Config.WorkingDir != "/home/app" ||
		got.Config.StopSignal != "SIGINT" || len(got.Config.ExposedPorts) != 1 {
		t.Errorf("Pull().Config = %+v, want %+v", got.Config, cfg)
	}
	byDigest, err := s.Pull(context.Background(), reg+"/test/app@"+digest, nil)
	if err != nil {
		t.Fatal(err)
	}
	if byDigest.Digest != digest {
		t.Errorf("Pull(@digest).Digest = %s, want %s", byDigest.Digest, digest)
	}

	dir := filepath.Join(t.TempDir(), "rootfs")
	if err := s.Unpack(context.Background(), got, dir); err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	for p, want := range map[string]string{
		"etc/motd": "three\n", "usr/lib/added": "through the symlink", "usr/lib/libfoo": "foo",
		"data/new": "n", "shared": "replaced", "home/app/notes": "mine",
	} {
		if got := read(p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	for _, p := range []string{"gone", "data/old", "data/keep"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: Lstat = %v, want it removed by a whiteout", p, err)
		}
	}
	tool, err := os.Stat(filepath.Join(dir, "bin/tool"))
	if err != nil {
		t.Fatal(err)
	}
	if tool.Mode()&os.ModeSetuid == 0 || tool.Mode().Perm() != 0o755 {
		t.Errorf("bin/tool mode = %v, want setuid 0755", tool.Mode())
	}
	hard, err := os.Stat(filepath.Join(dir, "bin/hard"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(tool, hard) {
		t.Errorf("bin/hard is not a hard link of bin/tool")
	}
	srv, err := os.Stat(filepath.Join(dir, "srv"))
	if err != nil {
		t.Fatal(err)
	}
	if srv.Mode()&os.ModeSetgid == 0 {
		t.Errorf("srv mode = %v, want setgid", srv.Mode())
	}
	notes, err := os.Stat(filepath.Join(dir, "home/app/notes"))
	if err != nil {
		t.Fatal(err)
	}
	if st := notes.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
		t.Errorf("home/app/notes owner = %d:%d, want 1000:1000", st.Uid, st.Gid)
	}
	buf := make([]byte, 64)
	if n, err := unix.Lgetxattr(filepath.Join(dir, "home/app/notes"), "user.origin", buf); err != nil || string(buf[:n]) != "test" {
		t.Errorf("user.origin xattr = %q, %v, want test", buf[:max(n, 0)], err)
	}
	if _, err := unix.Lgetxattr(filepath.Join(dir, "home/app/notes"), "trusted.overlay.opaque", buf); err == nil {
		t.Errorf("the trusted.overlay.opaque xattr was set; want it skipped")
	}
	if target, err := os.Readlink(filepath.Join(dir, "lib")); err != nil || target != "usr/lib" {
		t.Errorf("lib -> %q, %v, want usr/lib", target, err)
	}
	if _, err := os.Stat(dir + ".partial"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the partial folder is left: %v", err)
	}
	// A folder that exists is complete: Unpack does not touch it.
	os.WriteFile(filepath.Join(dir, "mark"), nil, 0o644)
	if err := s.Unpack(context.Background(), got, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "mark")); err != nil {
		t.Errorf("a second Unpack remade the folder: %v", err)
	}
}

// TestPullSharesLayers: a second image with the same base layer fetches
// only its own.
func TestPullSharesLayers(t *testing.T) {
	t.Parallel()
	reg := ocitest.Registry(t)
	b := base(t)
	ocitest.Push(t, reg+"/test/one:1", ocitest.Image(t, v1.Config{}, b, ocitest.Layer(t, ocitest.File{Name: "one", Body: "1"})))
	ocitest.Push(t, reg+"/test/two:1", ocitest.Image(t, v1.Config{}, b, ocitest.Layer(t, ocitest.File{Name: "two", Body: "2"})))
	s := &Store{Root: t.TempDir()}
	one, err := s.Pull(context.Background(), reg+"/test/one:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(s.blobPath(one.Layers[0]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pull(context.Background(), reg+"/test/two:1", nil); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(s.blobPath(one.Layers[0]))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Errorf("the shared layer was fetched again")
	}
	blobs, _ := os.ReadDir(filepath.Join(s.Root, "blobs", "sha256"))
	if len(blobs) != 3 {
		t.Errorf("store holds %d blobs, want 3 (one shared, one each)", len(blobs))
	}
}

// cutTransport counts the bytes of layers it carries and, while cut is
// above zero, fails a layer's download after that many bytes: a
// connection lost, or the process killed, mid-layer.
type cutTransport struct {
	layer    string // the layer's digest
	cut, got atomic.Int64
	ranges   atomic.Int64
}

func (c *cutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || !strings.HasSuffix(req.URL.Path, "/blobs/"+c.layer) {
		return res, err
	}
	if req.Header.Get("Range") != "" {
		c.ranges.Add(1)
	}
	res.Body = &cutBody{ReadCloser: res.Body, c: c, left: c.cut.Load()}
	return res, nil
}

type cutBody struct {
	io.ReadCloser
	c    *cutTransport
	left int64
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.c.got.Add(int64(n))
	if b.left > 0 {
		if b.left -= int64(n); b.left <= 0 {
			return n, errors.New("connection lost (test)")
		}
	}
	return n, err
}

// TestPullResumes: a layer's download cut short is kept, and the next
// pull asks the registry for the rest alone, says so, and stores the
// layer verified against its digest.
func TestPullResumes(t *testing.T) {
	t.Parallel()
	reg := ocitest.Registry(t)
	noise := make([]byte, 3<<20)
	rand.NewChaCha8([32]byte{1}).Read(noise)
	big := ocitest.Layer(t, ocitest.File{Name: "big", Body: string(noise)})
	size, err := big.Size()
	if err != nil {
		t.Fatal(err)
	}
	ocitest.Push(t, reg+"/test/big:1", ocitest.Image(t, v1.Config{}, big))
	h, _ := big.Digest()
	tr := &cutTransport{layer: h.String()}
	s := &Store{Root: t.TempDir(), Transport: tr}
	tr.cut.Store(size / 3)
	if _, err := s.Pull(context.Background(), reg+"/test/big:1", nil); err == nil {
		t.Fatal("a pull whose layer download was cut = nil error, want one")
	}
	st, err := os.Stat(filepath.Join(s.Root, "tmp", h.Hex+".partial"))
	if err != nil || st.Size() == 0 {
		t.Fatalf("no partial layer kept after the cut: %v", err)
	}
	if err := s.Sweep(); err != nil {
		t.Fatal(err)
	}
	tr.cut.Store(0)
	tr.got.Store(0)
	var said []string
	img, err := s.Pull(context.Background(), reg+"/test/big:1", func(m string) { said = append(said, m) })
	if err != nil {
		t.Fatalf("the pull after the cut = %v", err)
	}
	if _, err := os.Stat(s.blobPath(img.Layers[0])); err != nil {
		t.Errorf("the layer is not stored: %v", err)
	}
	if got := tr.got.Load(); tr.ranges.Load() != 1 || got != size-st.Size() {
		t.Errorf("the second pull fetched %d bytes in %d ranged requests; want the %d left of %d in one", got, tr.ranges.Load(), size-st.Size(), size)
	}
	if !slices.ContainsFunc(said, func(m string) bool { return strings.HasPrefix(m, "resuming layer 1/1") }) {
		t.Errorf("progress said %q; want the resumption", said)
	}
}

// TestSweep: a killed pull's partial layer stays a day for the next pull
// to go on with; other leftovers go, and the stored layers stay.
func TestSweep(t *testing.T) {
	t.Parallel()
	reg := ocitest.Registry(t)
	ocitest.Push(t, reg+"/test/app:1", ocitest.Image(t, v1.Config{}, base(t)))
	s := &Store{Root: t.TempDir()}
	img, err := s.Pull(context.Background(), reg+"/test/app:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(s.Root, "tmp")
	stray, partial, stale := filepath.Join(tmp, img.Layers[0].Hex+".123"), filepath.Join(tmp, "aa.partial"), filepath.Join(tmp, "bb.partial")
	for _, f := range []string{stray, partial, stale} {
		if err := os.WriteFile(f, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-25 * time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	if err := s.Sweep(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{stray, stale} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left: %v", filepath.Base(f), err)
		}
	}
	if _, err := os.Stat(partial); err != nil {
		t.Errorf("the day-old partial layer went: %v", err)
	}
	if _, err := os.Stat(s.blobPath(img.Layers[0])); err != nil {
		t.Errorf("the stored layer went: %v", err)
	}
}

// corruptBlobs is the registry's own in-memory blob storage, except that
// it serves other bytes for one blob: a registry whose disk went bad.
type corruptBlobs struct {
	memBlobs
	bad v1.Hash
}

// memBlobs is what the registry's in-memory blob storage offers.
type memBlobs interface {
	registry.BlobHandler
	registry.BlobStatHandler
	registry.BlobPutHandler
}

func (c corruptBlobs) Get(ctx context.Context, repo string, h v1.Hash) (io.ReadCloser, error) {
	rc, err := c.memBlobs.Get(ctx, repo, h)
	if err != nil || h != c.bad {
		return rc, err
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return nil, err
	}
	b[len(b)/2] ^= 0xff
	return io.NopCloser(bytes.NewReader(b)), nil
}

// TestPullRefusesWrongDigest: a layer whose bytes, or whose uncompressed
// tar, do not match the digest the image names is refused, and a
// reference by a digest the registry does not have is not found; no
// blob or tree is kept.
func TestPullRefusesWrongDigest(t *testing.T) {
	needRoot(t)
	t.Parallel()
	layer := ocitest.Layer(t, ocitest.File{Name: "app", Body: strings.Repeat("x", 4096)})
	h, err := layer.Digest()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("layer bytes", func(t *testing.T) {
		t.Parallel()
		reg := ocitest.Registry(t, registry.WithBlobHandler(corruptBlobs{memBlobs: registry.NewInMemoryBlobHandler().(memBlobs), bad: h}))
		ocitest.Push(t, reg+"/test/bad:1", ocitest.Image(t, v1.Config{}, layer))
		s := &Store{Root: t.TempDir()}
		if _, err := s.Pull(context.Background(), reg+"/test/bad:1", nil); err == nil {
			t.Fatal("Pull of a corrupt layer = nil error, want one")
		}
		if _, err := os.Stat(s.blobPath(h)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the corrupt layer is stored: %v", err)
		}
	})
	t.Run("diff_id", func(t *testing.T) {
		t.Parallel()
		reg := ocitest.Registry(t)
		img := ocitest.Image(t, v1.Config{}, layer)
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		cf.RootFS.DiffIDs[0].Hex = strings.Repeat("0", 64)
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			t.Fatal(err)
		}
		ocitest.Push(t, reg+"/test/bad:1", img)
		s := &Store{Root: t.TempDir()}
		got, err := s.Pull(context.Background(), reg+"/test/bad:1", nil)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "rootfs")
		if err := s.Unpack(context.Background(), got, dir); !errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("Unpack with a wrong diff_id = %v, want ErrDigestMismatch", err)
		}
		for _, p := range []string{dir, dir + ".partial"} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s is left after a refused unpack: %v", p, err)
			}
		}
	})
	t.Run("reference digest", func(t *testing.T) {
		t.Parallel()
		reg := ocitest.Registry(t)
		ocitest.Push(t, reg+"/test/app:1", ocitest.Image(t, v1.Config{}, layer))
		s := &Store{Root: t.TempDir()}
		_, err := s.Pull(context.Background(), reg+"/test/app@sha256:"+strings.Repeat("1", 64), nil)
		if err == nil || !strings.Contains(err.Error(), "MANIFEST_UNKNOWN") {
			t.Fatalf("Pull by an unknown digest = %v, want MANIFEST_UNKNOWN", err)
		}
	})
}

// recordingTransport is the transport under the guard, recording what
// reaches it; it answers nothing (the guard's test sends no traffic).
type recordingTransport struct{ hosts *[]string }

func (r recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	*r.hosts = append(*r.hosts, req.URL.Host)
	return nil, errors.New("no network in this test")
}

// TestPlainHTTPGuard: plain HTTP reaches only loopback registries and
// those marked insecure; HTTPS reaches any.
func TestPlainHTTPGuard(t *testing.T) {
	t.Parallel()
	var hosts []string
	s := &Store{Insecure: []string{"registry.lan:5000"}}
	g := schemeGuard{base: recordingTransport{&hosts}, plainOK: s.insecure}
	for _, tc := range []struct {
		url     string
		refused bool
	}{
		{"http://10.0.0.1:5000/v2/", true},
		{"http://registry.example/v2/", true},
		{"http://registry.lan/v2/", true},
		{"http://registry.lan:5000/v2/", false},
		{"http://127.0.0.1:5000/v2/", false},
		{"http://localhost:5000/v2/", false},
		{"https://10.0.0.1:5000/v2/", false},
	} {
		req, err := http.NewRequest("GET", tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = g.RoundTrip(req)
		if got := errors.Is(err, ErrPlainHTTP); got != tc.refused {
			t.Errorf("RoundTrip(%s) = %v, refused %t, want %t", tc.url, err, got, tc.refused)
		}
	}
	if want := []string{"registry.lan:5000", "127.0.0.1:5000", "localhost:5000", "10.0.0.1:5000"}; !slices.Equal(hosts, want) {
		t.Errorf("requests sent on = %v, want %v", hosts, want)
	}
}
