//go:build linux && cgo

package lxc

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	golxc "github.com/lxc/go-lxc"

	"corpus/drivers"
	"corpus/images/oci"
	"corpus/internal/atomicfile"
)

// imagesDir is the lxcpath, inside the driver's, holding image caches.
// Guest names are DNS labels and cannot start with a dot, so it never
// clashes with a guest.
const imagesDir = ".images"

// imageSpec says how to build one image's cache container.
type imageSpec struct {
	name     string // corpus image name, "debian/bookworm"
	cache    string // cache container name in <Path>/.images
	template golxc.TemplateOptions
	// prepare adjusts the built root file system for corpus guests.
	prepare func(rootfs string) error
	// from, when set, is the cache this one is a copy of, with its
	// files shifted into idmap: the image of unprivileged guests.
	from  string
	idmap idmap
	// packages are the Debian packages the template installs; the
	// build checks they are (see packages_linux.go).
	packages []string
	// ref is set for an OCI image reference not pulled yet: pullImage
	// resolves it to the image spec of its digest, whose oci is the
	// pulled image the cache is unpacked from (see oci_linux.go).
	ref bool
	oci *oci.Image
}

// unprivileged is img's image for overlay guests in the user namespace
// of m where they cannot stack on an idmapped mount of img's cache (see
// idmount_linux.go): a copy of img's cache, made once per id range,
// whose files belong to the range's ids.
func unprivileged(img imageSpec, m idmap) imageSpec {
	return imageSpec{
		name:     fmt.Sprintf("%s (ids from %d)", img.name, m.UID),
		cache:    fmt.Sprintf("%s-u%d-%d", img.cache, m.UID, m.GID),
		from:     img.cache,
		idmap:    m,
		packages: img.packages,
	}
}

// images are the images the driver builds by itself with lxc templates.
var images = map[string]imageSpec{
	// busybox builds offline in about a second from busybox-static.
	"busybox": {
		name:     "busybox",
		cache:    "busybox",
		template: golxc.TemplateOptions{Template: "busybox"},
		prepare:  staticNetworkBusybox,
	},
	// debian/bookworm runs debootstrap against the Debian mirror; it takes
	// minutes. The template also keeps its own download cache in
	// /var/cache/lxc/debian, shared by everything on the host that uses it.
	"debian/bookworm": {
		name:     "debian/bookworm",
		cache:    "debian-bookworm",
		template: golxc.TemplateOptions{Template: "debian", Release: "bookworm"},
		prepare:  staticNetworkDebian,
	},
}

// Guests get a static address from LXC before their init runs; the
// templates' images would ask DHCP instead, and a DHCP client that gets no
// lease removes the address. These hooks keep the address LXC set.

// staticNetworkBusybox drops udhcpc from the busybox image's boot script.
func staticNetworkBusybox(rootfs string) error {
	return editFile(filepath.Join(rootfs, "etc/init.d/rcS"), func(s string) string {
		var keep []string
		for _, line := range strings.Split(s, "\n") {
			if !strings.Contains(line, "udhcpc") {
				keep = append(keep, line)
			}
		}
		return strings.Join(keep, "\n")
	})
}

// staticNetworkDebian makes ifupdown leave eth0 as LXC configured it.
func staticNetworkDebian(rootfs string) error {
	return editFile(filepath.Join(rootfs, "etc/network/interfaces"), func(s string) string {
		return strings.ReplaceAll(s, "iface eth0 inet dhcp", "iface eth0 inet manual")
	})
}

// editFile rewrites a file of an image through f, keeping its mode.
func editFile(path string, f func(string) string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("preparing image: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("preparing image: %w", err)
	}
	if err := atomicfile.Write(path, []byte(f(string(b))), st.Mode().Perm()); err != nil {
		return fmt.Errorf("preparing image: %w", err)
	}
	return nil
}

// imageNames returns the names of the images in sorted order.
func imageNames() []string {
	names := make([]string, 0, len(images))
	for n := range images {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// cloneMode is how a guest's root file system is made from an image cache.
//
// Measured on the project's test host (ext4 on virtio, 2 cores, liblxc
// 5.0.2, other work running beside it) with
// `go test -run '^$' -bench CreateStart -benchtime 20x -count 3 ./drivers/lxc/`
// and, for Debian, the same Create timed in a test; per guest, warm cache:
//
//	                           busybox Create   debian/bookworm Create
//	overlay snapshot clone        9-16 ms           19-21 ms
//	full copy (dir, rsync)      156-211 ms          1.5-4.1 s
//	template build, no cache     1.0-1.5 s          2m54s (debootstrap)
//
// Start adds 33-60 ms either way. The overlay clone is fastest and its cost
// does not grow with the image, so it is the default wherever overlayfs
// works. Its trade-off: a guest's root is an overlay delta over the cache's
// rootfs, so the cache must stay put and unchanged while any guest uses
// it. liblxc records the dependents in the cache's lxc_snapshots file and
// refuses to destroy a cache that still has some, and the driver never
// rebuilds a complete cache. A copy is self-contained and survives the
// cache being removed; it is the fallback when overlayfs is unusable.
// Hardlinked copies were ruled out: a guest writing a file in place would
// change the cache.
type cloneMode int

const (
	// cloneOverlay makes an overlayfs snapshot of the cache's rootfs.
	cloneOverlay cloneMode = iota
	// cloneCopy copies the cache's rootfs into the guest's directory.
	cloneCopy
)

func (m cloneMode) String() string {
	if m == cloneOverlay {
		return "overlay"
	}
	return "copy"
}

// options returns the liblxc clone options that make a guest in path.
func (m cloneMode) options(path string) golxc.CloneOptions {
	if m == cloneOverlay {
		return golxc.CloneOptions{ConfigPath: path, Backend: golxc.Overlayfs, Snapshot: true}
	}
	return golxc.CloneOptions{ConfigPath: path, Backend: golxc.Directory}
}

// imageMarker is written beside a cache container once it is complete; a
// cache container without it is a leftover of an interrupted build.
type imageMarker struct {
	Image string    `json:"image"`
	Built time.Time `json:"built"`
}

func (d *Driver) markerPath(img imageSpec) string {
	return filepath.Join(d.imgPath, img.cache+".json")
}

// imageBuild is one running build of an image cache. Everyone waiting for
// it gets its progress.
type imageBuild struct {
	done chan struct{}
	err  error // set before done closes

	mu       sync.Mutex
	next     int
	watchers map[int]drivers.ProgressFunc
}

func (b *imageBuild) watch(f drivers.ProgressFunc) (stop func()) {
	if f == nil {
		return func() {}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.next
	b.next++
	b.watchers[id] = f
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.watchers, id)
	}
}

func (b *imageBuild) report(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range b.watchers {
		f(msg)
	}
}

// EnsureImage builds the named image's cache unless it is complete
// already, reporting progress; Create does the same when it needs the
// image. An image the driver does not know is drivers.ErrUnknownImage.
func (d *Driver) EnsureImage(ctx context.Context, name string, progress drivers.ProgressFunc) error {
	return d.EnsureImagePackages(ctx, name, nil, progress)
}

// EnsureImagePackages is EnsureImage for the image with packages
// installed (drivers.GuestSpec.Packages).
func (d *Driver) EnsureImagePackages(ctx context.Context, name string, packages []string, progress drivers.ProgressFunc) error {
	img, err := imageFor(name, packages)
	if err != nil {
		return err
	}
	built := d.built.Load()
	d.cacheMu.RLock()
	cache, err := d.ensureImage1(ctx, img, progress)
	d.cacheMu.RUnlock()
	if err == nil && d.built.Load() != built {
		d.collectImages(ctx, cache)
	}
	return err
}

// ensureImage1 pulls img when it is a reference, then ensures its cache
// and records its use; it returns the cache.
func (d *Driver) ensureImage1(ctx context.Context, img imageSpec, progress drivers.ProgressFunc) (string, error) {
	if img.ref {
		var err error
		if img, err = d.pullImage(ctx, img.name, progress); err != nil {
			return "", err
		}
	}
	if err := d.ensureImage(ctx, img, progress); err != nil {
		return "", err
	}
	d.touchImage(img.cache)
	return img.cache, nil
}

// ensureImage returns once img's cache is complete, building it when
// needed. Concurrent calls for one cache share a single build; a caller
// whose ctx ends stops waiting, but the build runs on (liblxc templates
// cannot be interrupted) and later callers reuse it.
func (d *Driver) ensureImage(ctx context.Context, img imageSpec, progress drivers.ProgressFunc) error {
	d.buildsMu.Lock()
	b, running := d.builds[img.cache]
	if !running {
		if _, err := os.Stat(d.markerPath(img)); err == nil {
			d.buildsMu.Unlock()
			return nil
		}
		b = &imageBuild{done: make(chan struct{}), watchers: make(map[int]drivers.ProgressFunc)}
		d.builds[img.cache] = b
	}
	stop := b.watch(progress)
	defer stop()
	d.buildsMu.Unlock()

	if running {
		if progress != nil {
			progress(fmt.Sprintf("waiting for image %s to be built", img.name))
		}
	} else {
		go func() {
			b.err = d.buildImage(img, b)
			d.buildsMu.Lock()
			delete(d.builds, img.cache)
			d.buildsMu.Unlock()
			close(b.done)
		}()
	}
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return fmt.Errorf("waiting for image %s: %w", img.name, ctx.Err())
	}
}

// buildImage builds img's cache container from its template and marks it
// complete. A leftover of an interrupted build is destroyed first.
func (d *Driver) buildImage(img imageSpec, b *imageBuild) error {
	start := time.Now()
	b.report("building image %s", img.name)
	d.log.Info("building image", "image", img.name)
	d.built.Add(1)

	if err := os.MkdirAll(d.imgPath, 0o755); err != nil {
		return fmt.Errorf("building image %s: %w", img.name, err)
	}
	c, err := golxc.NewContainer(img.cache, d.imgPath)
	if err != nil {
		return fmt.Errorf("building image %s: %w", img.name, err)
	}
	defer c.Release()
	// Copies that did not finish (see copyContainer).
	leftovers, _ := filepath.Glob(filepath.Join(d.imgPath, "."+img.cache+".copy-*"))
	for _, l := range leftovers {
		os.RemoveAll(l)
	}
	if c.Defined() {
		d.log.Warn("removing incomplete image cache", "image", img.name)
		if err := c.Destroy(); err != nil {
			return fmt.Errorf("building image %s: removing incomplete cache: %w", img.name, err)
		}
	}
	// Setting the log file first would make liblxc skip the host's
	// default configuration (lxc.default_config), so load it here.
	if def := golxc.GlobalConfigItem("lxc.default_config"); def != "" {
		if _, err := os.Stat(def); err == nil {
			if err := c.LoadConfigFile(def); err != nil {
				return fmt.Errorf("building image %s: loading %s: %w", img.name, def, err)
			}
		}
	}
	logFile := filepath.Join(d.imgPath, img.cache+".log")
	if err := c.SetLogFile(logFile); err != nil {
		return fmt.Errorf("building image %s: %w", img.name, err)
	}

	switch stored, err := d.fromStore(img); {
	case err != nil:
		return fmt.Errorf("building image %s: %w", img.name, err)
	case stored:
		b.report("copied image %s from the image store %s", img.name, d.store)
	case img.oci != nil:
		if err := d.unpackImage(img); err != nil {
			return fmt.Errorf("building image %s: %w", img.name, err)
		}
	case img.from != "":
		if err := d.copyShifted(img); err != nil {
			return fmt.Errorf("building image %s: %w", img.name, err)
		}
	default:
		if err := d.runTemplate(c, img, b, logFile, start); err != nil {
			return err
		}
		d.toStore(img)
	}

	m, err := json.Marshal(imageMarker{Image: img.name, Built: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("building image %s: %w", img.name, err)
	}
	if err := atomicfile.Write(d.markerPath(img), m, 0o644); err != nil {
		return fmt.Errorf("building image %s: %w", img.name, err)
	}
	took := time.Since(start).Round(time.Millisecond)
	b.report("built image %s in %s", img.name, took)
	d.log.Info("built image", "image", img.name, "duration", took)
	return nil
}

// tmpdir is the agent's TMPDIR as it was before templates ran, and how
// many run now (see withoutTMPDIR).
var tmpdir struct {
	sync.Mutex
	running int
	value   string
	set     bool
}

// withoutTMPDIR unsets TMPDIR until the restore function it returns is
// called (by every caller, when several templates run at once). liblxc
// runs a template with the agent's own environment, and the template
// runs apt and the packages' scripts in a chroot of the image, where a
// TMPDIR of the host (a test runner's, a service manager's) does not
// exist: PostgreSQL's package then fails to install. Meanwhile the
// agent's own temporary files go to /tmp (os.TempDir).
func withoutTMPDIR() (restore func()) {
	tmpdir.Lock()
	defer tmpdir.Unlock()
	if tmpdir.running == 0 {
		tmpdir.value, tmpdir.set = os.LookupEnv("TMPDIR")
		os.Unsetenv("TMPDIR")
	}
	tmpdir.running++
	return func() {
		tmpdir.Lock()
		defer tmpdir.Unlock()
		if tmpdir.running--; tmpdir.running == 0 && tmpdir.set {
			os.Setenv("TMPDIR", tmpdir.value)
		}
	}
}

// runTemplate builds c's root file system with img's lxc template, then
// prepares it for corpus guests.
func (d *Driver) runTemplate(c *golxc.Container, img imageSpec, b *imageBuild, logFile string, start time.Time) error {
	ticker := time.NewTicker(30 * time.Second)
	defer ticker.Stop()
	created := make(chan error, 1)
	restore := withoutTMPDIR()
	go func() { created <- c.Create(img.template); restore() }()
wait:
	for {
		select {
		case err := <-created:
			if err != nil {
				return fmt.Errorf("building image %s: running template %s: %w%s",
					img.name, img.template.Template, err, logTail(logFile))
			}
			break wait
		case <-ticker.C:
			b.report("still building image %s (%s)", img.name, time.Since(start).Round(time.Second))
		}
	}

	rootfs := filepath.Join(d.imgPath, img.cache, "rootfs")
	if err := checkPackages(rootfs, img.packages); err != nil {
		return fmt.Errorf("building image %s: %w", img.name, err)
	}
	if img.prepare != nil {
		if err := img.prepare(rootfs); err != nil {
			return fmt.Errorf("building image %s: %w", img.name, err)
		}
	}
	return nil
}

// copyShifted makes img's cache a copy of img.from's, with every file
// shifted into img.idmap. The copy is a plain directory: overlay guests
// stack on it as on any cache.
func (d *Driver) copyShifted(img imageSpec) error {
	return copyContainer(filepath.Join(d.imgPath, img.from), filepath.Join(d.imgPath, img.cache), func(tmp string) error {
		// The guests' root reaches the root file system through the
		// cache's folder.
		if err := os.Lchown(tmp, int(img.idmap.UID), int(img.idmap.GID)); err != nil {
			return err
		}
		return d.ids.shift(filepath.Join(tmp, "rootfs"), img.idmap)
	})
}

// copyPattern matches the temporary folders of copyContainer.
const copyPattern = ".*.copy-*"

// sweepCopies removes what copies into dir that were cut short (the
// agent stopped mid-copy) left behind. Only for folders that are this
// driver's alone: a shared image store may hold another's copy in
// progress.
func sweepCopies(dir string) error {
	left, err := filepath.Glob(filepath.Join(dir, copyPattern))
	if err != nil {
		return err
	}
	for _, p := range left {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

// copyContainer copies the container folder src (its rootfs and config)
// to dst, whose last element is the copy's name, through a temporary
// folder beside dst that finish, when set, adjusts before it is renamed
// into place: dst is whole or absent.
//
// The copy is made here, not by liblxc's clone: that forks without exec
// in this multi-threaded process and its child deadlocked on a lock
// another thread held at the fork (seen in a CI run: a guest's Clone of
// the cache hung 18 minutes). cp runs as a process of its own, and the
// config is the source's with its name and root file system changed.
func copyContainer(src, dst string, finish func(tmp string) error) (err error) {
	tmp, err := os.MkdirTemp(filepath.Dir(dst), strings.Replace(copyPattern, "*", filepath.Base(dst), 1))
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o770); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", "--", filepath.Join(src, "rootfs"), filepath.Join(tmp, "rootfs")).CombinedOutput(); err != nil {
		return fmt.Errorf("copying %s: %v: %s", src, err, strings.TrimSpace(string(out)))
	}
	cfg, err := os.ReadFile(filepath.Join(src, "config"))
	if err != nil {
		return err
	}
	var lines []string
	for _, line := range strings.Split(string(cfg), "\n") {
		key, _, _ := strings.Cut(line, "=")
		switch strings.TrimSpace(key) {
		case "lxc.log.file":
			// The copy's user sets its own: a copy that kept the
			// original's would log into the folder of whoever built
			// it (another agent's, long gone, for the image store's).
			continue
		case "lxc.rootfs.path":
			line = "lxc.rootfs.path = dir:" + filepath.Join(dst, "rootfs")
		case "lxc.uts.name":
			line = "lxc.uts.name = " + filepath.Base(dst)
		}
		lines = append(lines, line)
	}
	if err := atomicfile.Write(filepath.Join(tmp, "config"), []byte(strings.Join(lines, "\n")), 0o640); err != nil {
		return err
	}
	if finish != nil {
		if err := finish(tmp); err != nil {
			return err
		}
	}
	return os.Rename(tmp, dst)
}
