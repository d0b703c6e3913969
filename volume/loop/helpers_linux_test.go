package loop

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// requireHost skips a test that needs root, loop devices and ext4 tools
// when this host lacks them.
func requireHost(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for loop devices and mounts")
	}
	if _, err := os.Stat(loopControl); err != nil {
		t.Skipf("needs %s for loop devices: %v", loopControl, err)
	}
	for _, tool := range []string{"mkfs.ext4", "e2fsck", "resize2fs", "e2label"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// newTestBackend returns a Backend over a fresh root and registers a
// cleanup that unmounts and detaches everything made under that root, also
// when the test fails, and then checks nothing is left.
func newTestBackend(t *testing.T) (*Backend, string) {
	t.Helper()
	requireHost(t)
	root := t.TempDir()
	t.Cleanup(func() { cleanRoot(t, root) })
	return newBackendAt(t, root), root
}

func newBackendAt(t *testing.T, root string) *Backend {
	t.Helper()
	log := slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := New(Config{Root: root, Logger: log})
	if err != nil {
		t.Fatalf("New(%s) = %v", root, err)
	}
	return b
}

// cleanRoot unmounts and detaches whatever backs the images under root,
// without the Backend, so it works whatever state a failed test left, and
// then checks losetup no longer lists any of them.
func cleanRoot(t *testing.T, root string) {
	images, _ := filepath.Glob(filepath.Join(root, "*"))
	// Mount points the test made under root go first.
	for _, m := range mountsUnder(root) {
		if err := unix.Unmount(m, 0); err != nil {
			unix.Unmount(m, unix.MNT_DETACH)
		}
	}
	for _, img := range images {
		id, _, err := statID(img)
		if err != nil {
			continue
		}
		loops, _ := loopsFor(id)
		for _, l := range loops {
			mounts, _ := mountsOf(l)
			for _, m := range mounts {
				if err := unix.Unmount(m, 0); err != nil {
					unix.Unmount(m, unix.MNT_DETACH)
				}
			}
			if err := detachLoop(l); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	}
	if out, err := exec.Command("losetup", "-a").CombinedOutput(); err == nil && strings.Contains(string(out), root) {
		t.Errorf("cleanup: losetup -a still lists devices under %s:\n%s", root, out)
	}
}

func mountsUnder(root string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && strings.HasPrefix(unescapeMount(f[4]), root+"/") {
			out = append(out, unescapeMount(f[4]))
		}
	}
	// Innermost last in mountinfo; unmount innermost first.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// writeRandom writes n pseudo-random bytes to path, syncs, and returns
// their SHA-256.
func writeRandom(t *testing.T, path string, n int64, seed uint64) [32]byte {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	src := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	if _, err := io.CopyN(io.MultiWriter(f, h), src, n); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

func checksum(t *testing.T, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// statfsSize returns the size and free bytes df shows for a mount point.
func statfsSize(t *testing.T, path string) (size, avail int64) {
	t.Helper()
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		t.Fatal(err)
	}
	return int64(fs.Blocks) * fs.Bsize, int64(fs.Bavail) * fs.Bsize
}

// loopSize returns the size the kernel gives a loop device.
func loopSize(t *testing.T, dev string) int64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(sysBlock, filepath.Base(dev), "size"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n * 512
}

func fsckClean(t *testing.T, target string) {
	t.Helper()
	if out, err := exec.Command("e2fsck", "-f", "-n", target).CombinedOutput(); err != nil {
		t.Fatalf("e2fsck -f -n %s = %v\n%s", target, err, out)
	}
}

func mustErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s = %v, want %v", what, err, want)
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s = %v", what, err)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
