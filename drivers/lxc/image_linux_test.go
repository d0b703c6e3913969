//go:build linux && cgo

package lxc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"corpus/drivers"
	"corpus/internal/testrun"
)

func TestImageBuiltOnce(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	ctx := t.Context()

	const n = 3
	var wg sync.WaitGroup
	progress := make([]progressLog, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = d.Create(ctx, busybox(fmt.Sprintf("g%d", i)), progress[i].add)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Create %d = %v", i, err)
		}
	}
	// One build of the image, and one of its copy for the guests' id
	// range where they cannot stack on an idmapped mount of it.
	want := int64(1)
	if !d.idmapped {
		want = 2
	}
	if got := d.built.Load(); got != want {
		t.Fatalf("image builds after %d concurrent Creates = %d, want %d", n, got, want)
	}
	reported := 0
	for i := range progress {
		if progress[i].contains("building image busybox") || progress[i].contains("waiting for image busybox") {
			reported++
		}
	}
	if reported != n {
		t.Errorf("%d of %d Creates got build progress, want all", reported, n)
	}

	var warm progressLog
	start := time.Now()
	if err := d.Create(ctx, busybox("warm"), warm.add); err != nil {
		t.Fatalf("Create from cache = %v", err)
	}
	took := time.Since(start)
	if got := d.built.Load(); got != want {
		t.Errorf("image builds after a Create from cache = %d, want %d", got, want)
	}
	if len(warm.msgs) != 0 {
		t.Errorf("Create from cache reported progress %q, want none", warm.msgs)
	}
	t.Logf("Create from warm cache took %s (clone: %s)", took, d.clone)

	// Another instance on the same lxcpath reuses the finished cache.
	d2, err := New(Config{Path: d.path, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Create(ctx, busybox("second"), nil); err != nil {
		t.Fatalf("Create on a new instance = %v", err)
	}
	if got := d2.built.Load(); got != 0 {
		t.Errorf("new instance built the image %d times, want 0", got)
	}
	if l, err := d.List(ctx); err != nil || len(l) != n+2 {
		t.Errorf("List = %d guests, %v; want %d and no image caches", len(l), err, n+2)
	}
}

// TestDebianBookworm builds the Debian image with debootstrap, which takes
// minutes, so it runs only when asked.
func TestDebianBookworm(t *testing.T) {
	if os.Getenv("CORPUS_TEST_DEBIAN") != "1" {
		t.Skip("skipping: building debian/bookworm runs debootstrap for minutes; set CORPUS_TEST_DEBIAN=1 to run it")
	}
	d := newTestDriver(t)
	ctx := t.Context()
	spec := drivers.GuestSpec{ID: "id-deb", Name: "deb", Image: "debian/bookworm", MemoryBytes: 512 << 20}
	var progress progressLog
	start := time.Now()
	if err := d.Create(ctx, spec, func(msg string) { progress.add(msg); t.Log("progress:", msg) }); err != nil {
		t.Fatalf("Create = %v", err)
	}
	t.Logf("first debian/bookworm Create (image build) took %s", time.Since(start))
	start = time.Now()
	second := spec
	second.ID, second.Name = "id-deb2", "deb2"
	if err := d.Create(ctx, second, nil); err != nil {
		t.Fatalf("second Create = %v", err)
	}
	t.Logf("second debian/bookworm Create (from cache) took %s", time.Since(start))
	if err := d.Start(ctx, spec.Name); err != nil {
		t.Fatalf("Start = %v", err)
	}
	var out bytes.Buffer
	code, err := d.Exec(ctx, spec.Name, drivers.ExecRequest{Argv: []string{"cat", "/etc/debian_version"}, Stdout: &out})
	if err != nil || code != 0 || !strings.HasPrefix(out.String(), "12.") {
		t.Fatalf("Exec(cat /etc/debian_version) = %d, %v, %q; want 0, nil, 12.x", code, err, out.String())
	}
	start = time.Now()
	if err := d.Stop(ctx, spec.Name, 30*time.Second); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	// systemd must take the halt signal even right after boot; a kill
	// would come only after the 30s timeout.
	if took := time.Since(start); took > testrun.D(25*time.Second) {
		t.Errorf("Stop of a fresh systemd guest took %s: it did not halt", took)
	}
	t.Logf("debian Stop took %s", time.Since(start))
}

// TestPackagesWithTMPDIR: an agent whose TMPDIR is a folder of the host
// (a test runner's, a service manager's) still builds images with
// packages: the template runs apt and the packages' scripts in a chroot
// of the image, where that folder does not exist. ssl-cert's script
// makes its certificate in $TMPDIR (PostgreSQL depends on it).
func TestPackagesWithTMPDIR(t *testing.T) {
	if os.Getenv("CORPUS_TEST_DEBIAN") != "1" {
		t.Skip("skipping: building debian/bookworm with packages runs apt for minutes; set CORPUS_TEST_DEBIAN=1 to run it")
	}
	store := t.TempDir()
	d := newTestDriverWith(t, Config{Store: store})
	t.Setenv("TMPDIR", t.TempDir())
	if err := d.EnsureImagePackages(t.Context(), "debian/bookworm", []string{"ssl-cert"}, func(msg string) { t.Log("progress:", msg) }); err != nil {
		t.Fatalf("EnsureImagePackages(debian/bookworm, ssl-cert) with TMPDIR=%s = %v", os.Getenv("TMPDIR"), err)
	}
	if got := os.Getenv("TMPDIR"); got == "" {
		t.Error("TMPDIR was not given back after the build")
	}

	// The image store: a second agent of the host copies the image
	// instead of running apt, and the copy is a complete image of its
	// own.
	if n := d.stored.Load(); n != 0 {
		t.Errorf("the first build took %d images from an empty store", n)
	}
	d2 := newTestDriverWith(t, Config{Store: store})
	if err := d2.EnsureImagePackages(t.Context(), "debian/bookworm", []string{"ssl-cert"}, nil); err != nil {
		t.Fatalf("EnsureImagePackages from the store = %v", err)
	}
	if built, stored := d2.built.Load(), d2.stored.Load(); built != 1 || stored != 1 {
		t.Errorf("second driver: %d builds, %d from the store; want 1 build, taken from the store", built, stored)
	}
	img, err := imageFor("debian/bookworm", []string{"ssl-cert"})
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(d2.imgPath, img.cache)
	if err := checkPackages(filepath.Join(cache, "rootfs"), img.packages); err != nil {
		t.Errorf("the image copied from the store: %v", err)
	}
	cfg, err := os.ReadFile(filepath.Join(cache, "config"))
	if err != nil || !strings.Contains(string(cfg), "lxc.rootfs.path = dir:"+filepath.Join(cache, "rootfs")+"\n") {
		t.Errorf("the copy's config names another root file system (%v):\n%s", err, cfg)
	}
}

// TestNewSweepsCutCopies: the folders of copies an agent stopped in the
// middle of are removed when the driver opens its path again, and
// nothing else is.
func TestNewSweepsCutCopies(t *testing.T) {
	t.Parallel()
	requireLXC(t)
	path := t.TempDir()
	t.Cleanup(func() { cleanupPath(t, path) })
	left := []string{filepath.Join(path, ".web.copy-123"), filepath.Join(path, imagesDir, ".busybox.copy-9")}
	kept := []string{filepath.Join(path, "web"), filepath.Join(path, imagesDir, "busybox")}
	for _, p := range append(slices.Clone(left), kept...) {
		if err := os.MkdirAll(filepath.Join(p, "rootfs", "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(Config{Path: path, Logger: testLogger(t)}); err != nil {
		t.Fatal(err)
	}
	for _, p := range left {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after New: %v, want it removed", p, err)
		}
	}
	for _, p := range kept {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s after New: %v, want it kept", p, err)
		}
	}
}
