//go:build linux && cgo

package lxc

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	golxc "github.com/lxc/go-lxc"

	"corpus/drivers"
)

// requireLXC skips the test unless this process can run privileged LXC
// containers.
func requireLXC(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: LXC driver tests need root to run privileged containers")
	}
	if golxc.Version() == "" {
		t.Skip("skipping: liblxc reports no version; it is not usable here")
	}
	path := t.TempDir()
	t.Cleanup(func() { removeLockDir(path) })
	c, err := golxc.NewContainer("probe", path)
	if err != nil {
		t.Skipf("skipping: liblxc is not usable here: %v", err)
	}
	c.Release()
}

// removeLockDir removes the directory liblxc keeps in /run/lxc/lock for an
// lxcpath, and its parents up to os.TempDir()'s while they are empty.
func removeLockDir(path string) {
	const root = "/run/lxc/lock"
	dir := filepath.Join(root, path)
	os.RemoveAll(dir)
	for dir = filepath.Dir(dir); strings.HasPrefix(dir, filepath.Join(root, os.TempDir())+"/"); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			return
		}
	}
}

// newTestDriver returns a driver on a fresh lxcpath. Cleanup destroys,
// through liblxc directly, every container left in it (also when the test
// failed) and checks that nothing of it stays mounted.
func newTestDriver(t testing.TB) *Driver {
	t.Helper()
	return newTestDriverWith(t, Config{})
}

// newTestDriverWith is newTestDriver with cfg's settings but its path
// and logger.
func newTestDriverWith(t testing.TB, cfg Config) *Driver {
	t.Helper()
	requireLXC(t)
	path := t.TempDir()
	cfg.Path, cfg.Logger = path, testLogger(t)
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s) = %v", path, err)
	}
	t.Cleanup(func() { cleanupPath(t, path) })
	return d
}

// cleanupPath destroys every container under path and its image lxcpath,
// guests first since overlay guests pin their cache, and removes the lock
// directory liblxc keeps for the lxcpath.
func cleanupPath(t testing.TB, path string) {
	t.Helper()
	mounts, _ := filepath.Glob(filepath.Join(path, imageMountsDir, "*"))
	for _, m := range mounts {
		if err := unmountAll(m); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
	for _, p := range []string{path, filepath.Join(path, imagesDir)} {
		for _, name := range golxc.ContainerNames(p) {
			c, err := golxc.NewContainer(name, p)
			if err != nil {
				t.Errorf("cleanup: opening %s/%s: %v", p, name, err)
				continue
			}
			if c.Running() {
				if err := c.Stop(); err != nil {
					t.Errorf("cleanup: stopping %s/%s: %v", p, name, err)
				}
				c.Wait(golxc.STOPPED, 10*time.Second)
			}
			if err := c.Destroy(); err != nil {
				t.Errorf("cleanup: destroying %s/%s: %v", p, name, err)
			}
			c.Release()
		}
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Errorf("cleanup: %v", err)
	}
	for line := range strings.Lines(string(mountinfo)) {
		if strings.Contains(line, path) {
			t.Errorf("cleanup: still mounted: %s", line)
		}
	}
	removeLockDir(path)
}

// testLogger logs through t; the driver must not log after the test ends.
// Benchmarks discard logs.
func testLogger(t testing.TB) *slog.Logger {
	if _, ok := t.(*testing.B); ok {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// progressLog collects progress messages from any goroutine.
type progressLog struct {
	mu   sync.Mutex
	msgs []string
}

func (p *progressLog) add(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, msg)
}

func (p *progressLog) contains(sub string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.msgs {
		if strings.Contains(m, sub) {
			return true
		}
	}
	return false
}

// busybox returns a spec for a busybox guest.
func busybox(name string) drivers.GuestSpec {
	return drivers.GuestSpec{ID: "id-" + name, Name: name, Image: "busybox"}
}

// cgroupFile returns the content of a cgroup interface file of the cgroup
// that pid belongs to, for the given v1 controller or the v2 hierarchy.
func cgroupFile(t *testing.T, version, pid int, controller, file string) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir string
		switch {
		case version == 2 && parts[0] == "0":
			dir = filepath.Join(cgroupRoot, parts[2])
		case version == 1 && containsField(parts[1], controller):
			dir = filepath.Join(cgroupRoot, controller, parts[2])
		default:
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	t.Fatalf("pid %d has no %s cgroup (v%d)", pid, controller, version)
	return ""
}

func containsField(list, s string) bool {
	for f := range strings.SplitSeq(list, ",") {
		if f == s {
			return true
		}
	}
	return false
}

// notifyWriter records writes and signals the first one.
type notifyWriter struct {
	mu    sync.Mutex
	buf   strings.Builder
	first chan struct{}
	once  sync.Once
}

func newNotifyWriter() *notifyWriter { return &notifyWriter{first: make(chan struct{})} }

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.once.Do(func() { close(w.first) })
	return w.buf.Write(p)
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

var _ io.Writer = (*notifyWriter)(nil)
