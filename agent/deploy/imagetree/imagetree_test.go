package imagetree

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"corpus/agent/runtime/supervisor"
	"corpus/images/oci"
)

// imageTree writes an unpacked image's tree: sh in /bin, the app user,
// /www owned by it, a symlink.
func imageTree(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"bin", "etc", "www"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "bin", "busybox"), []byte("#!binary"), 0o755)
	os.Symlink("busybox", filepath.Join(root, "bin", "sh"))
	os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/www:/bin/sh\n"), 0o644)
	if err := os.Chown(filepath.Join(root, "www"), 1000, 1001); err != nil {
		t.Skipf("needs root to own files as the image's user: %v", err)
	}
	return root
}

// TestImageSourceConfigure: what a release from an image runs comes from
// its config and its tree: the program found in its PATH, its user's
// ids, its working dir, its env less what the pipeline gives; an image
// it cannot run is refused with why.
func TestImageSourceConfigure(t *testing.T) {
	root := imageTree(t)
	cfg := v1.Config{Entrypoint: []string{"sh", "-c"}, Cmd: []string{"exec httpd -f -p $PORT"}, User: "app", WorkingDir: "/www",
		Env: []string{"PORT=8080", "CORPUS_RELEASE=r9", "GREETING=hi", "bad-key=x"}}
	s := &Source{Image: &oci.Image{Reference: "localhost:5000/site:1", Digest: "sha256:" + strings.Repeat("0", 64), Config: cfg}, Root: root}
	if err := s.configure(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"/bin/sh", "-c", "exec httpd -f -p $PORT"}; !slices.Equal(s.Argv, want) {
		t.Errorf("argv = %q, want %q", s.Argv, want)
	}
	if s.UID != 1000 || s.GID != 1001 || s.Workdir != "/www" {
		t.Errorf("runs as %d:%d in %s, want 1000:1001 in /www", s.UID, s.GID, s.Workdir)
	}
	if len(s.Env) != 2 || s.Env["GREETING"] != "hi" || s.Env["PATH"] != supervisor.BasePath {
		t.Errorf("env = %v, want GREETING and the default PATH only (PORT and CORPUS_* are the pipeline's)", s.Env)
	}
	for _, tc := range []struct {
		name string
		cfg  v1.Config
		want string
	}{
		{"no command", v1.Config{}, "no entrypoint or cmd"},
		{"not in PATH", v1.Config{Cmd: []string{"httpd"}, Env: []string{"PATH=/bin"}}, `"httpd" is not in its PATH`},
		{"relative working dir", v1.Config{Cmd: []string{"/bin/sh"}, WorkingDir: "www"}, "not an absolute path"},
		{"unknown user", v1.Config{Cmd: []string{"/bin/sh"}, User: "nobody"}, "nobody"},
	} {
		s := &Source{Image: &oci.Image{Config: tc.cfg}, Root: root}
		if err := s.configure(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: configure = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestImageSourceTar: the tree goes to the guest as a tar with numeric
// owners (the guest's ids, not names looked up on the node), symlinks as
// symlinks, relative names.
func TestImageSourceTar(t *testing.T) {
	s := &Source{Root: imageTree(t)}
	var buf bytes.Buffer
	if err := s.WriteTar(&buf); err != nil {
		t.Fatal(err)
	}
	got := map[string]*tar.Header{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
	for _, name := range []string{"bin/", "bin/busybox", "bin/sh", "etc/passwd", "www/"} {
		if got[name] == nil {
			t.Fatalf("the tar lacks %s: %v", name, got)
		}
	}
	if h := got["www/"]; h.Uid != 1000 || h.Gid != 1001 || h.Uname != "" || h.Gname != "" {
		t.Errorf("www/ = %d:%d %q:%q, want 1000:1001 without names", h.Uid, h.Gid, h.Uname, h.Gname)
	}
	if h := got["bin/sh"]; h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
		t.Errorf("bin/sh = type %c -> %q, want a symlink to busybox", h.Typeflag, h.Linkname)
	}
}

func TestPinned(t *testing.T) {
	t.Parallel()
	d := "sha256:" + strings.Repeat("ab", 32)
	got, err := Pinned("127.0.0.1:5000/team/site:v1", d)
	if want := "127.0.0.1:5000/team/site@" + d; err != nil || got != want {
		t.Errorf("pinned = %q, %v; want %q", got, err, want)
	}
	if _, err := Pinned("busybox", d); err == nil {
		t.Error("Pinned(busybox) = nil error, want one: not a reference")
	}
}

// TestToDeploy: a deploy deploys the reference asked for, else the
// serving release's image at its digest, else no image (a commit).
func TestToDeploy(t *testing.T) {
	t.Parallel()
	d := "sha256:" + strings.Repeat("cd", 32)
	for _, tc := range []struct {
		asked, image, digest string
		ref, pull            string
	}{
		{"127.0.0.1:5000/team/site:v2", "127.0.0.1:5000/team/site:v1", d, "127.0.0.1:5000/team/site:v2", "127.0.0.1:5000/team/site:v2"},
		{"", "127.0.0.1:5000/team/site:v1", d, "127.0.0.1:5000/team/site:v1", "127.0.0.1:5000/team/site@" + d},
		{"", "", "", "", ""},
	} {
		ref, pull, err := ToDeploy(tc.asked, tc.image, tc.digest)
		if err != nil || ref != tc.ref || pull != tc.pull {
			t.Errorf("ToDeploy(%q, %q, %q) = %q, %q, %v; want %q, %q", tc.asked, tc.image, tc.digest, ref, pull, err, tc.ref, tc.pull)
		}
	}
}
