//go:build linux && cgo

package volumes

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	golxc "github.com/lxc/go-lxc"
	"google.golang.org/protobuf/proto"

	"corpus/drivers"
	"corpus/drivers/lxc"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/volume"
	"corpus/volume/loop"
)

// TestVolumeResizeRefusedBeforeStop: a real LXC guest with a real loop
// volume holding 200 MB it wrote just before. A shrink to 128 MiB is
// refused before anything is stopped, on every pass: the guest runs on
// (the same init process), the volume keeps its 256 MiB, its observed
// state says why, and the refusal is logged once. A size no backend
// makes (100000000 bytes, as recorded before the API rounded sizes) is
// refused the same way, where every pass used to stop the guest for a
// shrink that changed nothing and start it again. Once the data is
// removed, the shrink goes ahead: the guest is stopped and started once.
func TestVolumeResizeRefusedBeforeStop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for LXC guests, loop devices and mounts")
	}
	for _, tool := range []string{"mkfs.ext4", "e2fsck", "resize2fs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	if golxc.Version() == "" {
		t.Skip("liblxc reports no version; it is not usable here")
	}
	ctx := context.Background()
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(t.TempDir(), "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() }) // after the cleanup below, which logs
	logs := func() string { b, _ := os.ReadFile(logFile.Name()); return string(b) }
	logger := slog.New(slog.NewJSONHandler(logFile, nil))
	vols, err := loop.New(loop.Config{Root: filepath.Join(dir, "volumes", "images"), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	lxcPath := filepath.Join(dir, "lxc")
	d, err := lxc.New(lxc.Config{Path: lxcPath, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Destroy(ctx, "db"); err != nil {
			t.Errorf("cleanup: destroying the guest: %v", err)
		}
		destroyContainers(t, filepath.Join(lxcPath, ".images"))
		if err := vols.Delete(ctx, "db", true); err != nil && !errors.Is(err, volume.ErrNotFound) {
			t.Errorf("cleanup: deleting the volume: %v", err)
		}
		removeLockDir(lxcPath)
		if t.Failed() {
			t.Logf("agent log:\n%s", logs())
		}
	})

	g := &corpusv1.Guest{Id: "g1", Name: "db", Spec: &corpusv1.GuestSpec{Driver: lxc.Name, Image: "busybox",
		Volume: &corpusv1.VolumeSpec{SizeBytes: 256 << 20, Path: "/srv/data"}}}
	v := &corpusv1.Volume{Id: "v1", Name: "db", NodeId: "n1", SizeBytes: 256 << 20, GuestId: g.Id, GuestName: g.Name, DesiredState: corpusv1.VolumePresent}
	m := New(Config{
		StateDir: dir,
		Backend:  vols,
		Drivers:  map[string]drivers.Driver{lxc.Name: d},
		Order:    []string{lxc.Name},
		Node:     func() (string, string) { return "n1", "node-1" },
		Guest: func(id string) *corpusv1.Guest {
			if id == g.Id {
				return g
			}
			return nil
		},
		Kick:   func() {},
		Report: func() {},
		Logger: logger,
	})
	m.Set([]*corpusv1.Volume{v})
	mnt, err := m.mountVolume(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Create(ctx, drivers.GuestSpec{ID: g.Id, Name: g.Name, Image: "busybox", Mounts: []drivers.Mount{{Source: mnt, Target: "/srv/data"}}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx, g.Name); err != nil {
		t.Fatal(err)
	}
	guestPID := func() int {
		t.Helper()
		st, err := d.Inspect(ctx, g.Name)
		if err != nil || st.State != drivers.StateRunning {
			t.Fatalf("guest = %+v, %v; want it running", st, err)
		}
		return st.PID
	}
	pid := guestPID()
	var out bytes.Buffer
	if code, err := d.Exec(ctx, g.Name, drivers.ExecRequest{Argv: []string{"sh", "-c", "dd if=/dev/zero of=/srv/data/fill bs=1M count=200 && sync"}, Stdout: &out, Stderr: &out}); err != nil || code != 0 {
		t.Fatalf("writing 200 MB in the guest = %d, %v: %s", code, err, out.String())
	}
	h := &guestHandle{d: d, name: g.Name, timeout: 5 * time.Second}
	refusals := func() int { return strings.Count(logs(), `"msg":"volume resize refused`) }

	for _, tc := range []struct {
		size int64
		want error
	}{
		{128 << 20, volume.ErrCannotShrink},
		{100000000, volume.ErrInvalid},
	} {
		before := refusals()
		v = proto.Clone(v).(*corpusv1.Volume)
		v.SizeBytes = tc.size
		m.Set([]*corpusv1.Volume{v})
		for pass := range 3 {
			if err := m.resizeVolume(ctx, v, h); err != nil {
				t.Fatalf("resize to %d, pass %d = %v; want a refusal, not an error", tc.size, pass, err)
			}
		}
		if got := guestPID(); got != pid {
			t.Errorf("resize to %d: guest init PID %d, was %d: the guest was restarted for a refused resize", tc.size, got, pid)
		}
		if info, err := vols.Stat(ctx, v.Name); err != nil || info.SizeBytes != 256<<20 || info.FilesystemBytes != 256<<20 {
			t.Errorf("volume after the refused resize to %d = %+v, %v; want it at 256 MiB", tc.size, info, err)
		}
		if n := refusals() - before; n != 1 {
			t.Errorf("resize to %d: refusal logged %d times in 3 passes, want once", tc.size, n)
		}
		if r, ok := m.gate.Refused(v.Name, tc.size); !ok || !errors.Is(r.Err, tc.want) {
			t.Errorf("refusal of %d = %+v, %v; want one wrapping %v", tc.size, r, ok, tc.want)
		}
		o := m.reconcileVolume(ctx, v)
		if o.State != corpusv1.VolumeReady || o.SizeBytes != 256<<20 || o.RefusedSizeBytes != tc.size || !strings.Contains(o.Message, "not resized") || o.UsedBytes < 200<<20 {
			t.Errorf("observed after the refused resize to %d = %v; want ready at 256 MiB, %d refused, 200 MB used", tc.size, o, tc.size)
		}
	}

	// The data goes: the shrink is done, the guest stopped once for it.
	if code, err := d.Exec(ctx, g.Name, drivers.ExecRequest{Argv: []string{"rm", "/srv/data/fill"}}); err != nil || code != 0 {
		t.Fatalf("removing the data = %d, %v", code, err)
	}
	v = proto.Clone(v).(*corpusv1.Volume)
	v.SizeBytes = 128 << 20
	m.Set([]*corpusv1.Volume{v})
	if err := m.resizeVolume(ctx, v, h); err != nil {
		t.Fatalf("resize to 128 MiB with the data gone = %v", err)
	}
	after := guestPID()
	if after == pid {
		t.Errorf("guest init PID %d unchanged: the guest was not stopped for the shrink", after)
	}
	if err := m.resizeVolume(ctx, v, h); err != nil || guestPID() != after {
		t.Errorf("a pass at the desired size = %v, guest PID %d (was %d); want nothing done", err, guestPID(), after)
	}
	if o := m.reconcileVolume(ctx, v); o.SizeBytes != 128<<20 || o.RefusedSizeBytes != 0 || o.Message != "" {
		t.Errorf("observed after the shrink = %v; want 128 MiB, nothing refused", o)
	}
}

// destroyContainers destroys every container under lxcpath path (the
// driver's image containers, which it keeps for other guests).
func destroyContainers(t *testing.T, path string) {
	for _, name := range golxc.ContainerNames(path) {
		c, err := golxc.NewContainer(name, path)
		if err != nil {
			t.Errorf("cleanup: opening %s/%s: %v", path, name, err)
			continue
		}
		if err := c.Destroy(); err != nil {
			t.Errorf("cleanup: destroying %s/%s: %v", path, name, err)
		}
		c.Release()
	}
	removeLockDir(path)
}

// removeLockDir removes the folder liblxc keeps in /run/lxc/lock for
// lxcpath path, and its parents while they are empty.
func removeLockDir(path string) {
	const root = "/run/lxc/lock"
	dir := filepath.Join(root, path)
	os.RemoveAll(dir)
	for dir = filepath.Dir(dir); strings.HasPrefix(dir, root+"/"); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			return
		}
	}
}
