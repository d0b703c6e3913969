//go:build linux && cgo

package lxc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"corpus/drivers"
)

// TestOwnIDRanges: two guests in ranges of their own run as disjoint
// host ids (their init's uid_map), what each writes belongs to its own
// range on the host, the image's files stay the host's while each guest
// sees them as its own, and one guest's root, out on the host, can
// neither read nor write the other's files. A volume bound again to a
// guest of another range is shifted to it. So for overlays on idmapped
// mounts of the image, on copies of it per range (where the kernel
// cannot idmap), and for copied root file systems.
func TestOwnIDRanges(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"idmapped", "copy-per-range", "copy"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			d := newTestDriver(t)
			switch {
			case mode == "idmapped" && !d.idmapped:
				t.Fatalf("no idmapped mounts for overlays on this host (kernel 5.19 or later has them)")
			case mode == "copy-per-range":
				d.idmapped = false
			case mode == "copy":
				d.clone, d.idmapped = cloneCopy, false
			}
			testOwnIDRanges(t, d)
		})
	}
}

func testOwnIDRanges(t *testing.T, d *Driver) {
	if d.ids == nil || d.ids.ranges < 8 {
		t.Fatalf("driver has too few id ranges (%+v, %v)", d.ids, d.idsErr)
	}
	vol := t.TempDir()
	type guest struct {
		name string
		r    uint32
		m    idmap
		pid  int
		// root is the host user the guest's root is.
		root unix.Stat_t
	}
	gs := []*guest{{name: "tenant-a", r: 3}, {name: "tenant-b", r: 4}}
	for _, g := range gs {
		spec := busybox(g.name)
		spec.IDRange = g.r
		if g.r == 3 {
			spec.Mounts = []drivers.Mount{{Source: vol, Target: "/data"}}
		}
		if err := d.Create(t.Context(), spec, nil); err != nil {
			t.Fatalf("Create(%s) = %v", g.name, err)
		}
		if err := d.Start(t.Context(), g.name); err != nil {
			t.Fatalf("Start(%s) = %v", g.name, err)
		}
		g.m, _ = d.ids.idmap(g.r)
		g.pid = mustInspect(t, d, g.name).PID
		if err := unix.Stat(fmt.Sprintf("/proc/%d", g.pid), &g.root); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", g.pid))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.Join(strings.Fields(string(b)), " "), fmt.Sprintf("0 %d %d", g.m.UID, guestIDs); got != want {
			t.Errorf("uid_map of %s's init = %q, want %q", g.name, got, want)
		}
		if out, code := guestRun(t, d, g.name, "echo mine > /root/secret && chmod 600 /root/secret && echo open > /open && ls -ln /bin/busybox"); code != 0 {
			t.Fatalf("writing in %s: %d %s", g.name, code, out)
		} else if f := strings.Fields(out); len(f) < 4 || f[2] != "0" || f[3] != "0" {
			t.Errorf("the image's busybox in %s belongs to %q, want 0 0 (its root)", g.name, out)
		}
	}
	a, b := gs[0], gs[1]
	if a.m.UID+guestIDs > b.m.UID && b.m.UID+guestIDs > a.m.UID {
		t.Fatalf("ranges overlap: %+v and %+v", a.m, b.m)
	}
	for _, g := range gs {
		for _, rel := range []string{"root/secret", "open"} {
			if uid, gid := owner(t, hostPath(t, d, g.name, rel)); uid != g.m.UID || gid != g.m.GID {
				t.Errorf("/%s of %s belongs to host %d:%d, want %d:%d", rel, g.name, uid, gid, g.m.UID, g.m.GID)
			}
		}
	}
	if uid, _ := owner(t, filepath.Join(d.imgPath, "busybox", "rootfs", "bin", "busybox")); uid != 0 {
		t.Errorf("the image cache's busybox belongs to host uid %d after guests ran, want 0", uid)
	}
	// Tenant b's root, out of its guest, against tenant a's files.
	for _, tc := range []struct{ what, script string }{
		{"read a's secret", "cat " + hostPath(t, d, a.name, "root/secret")},
		{"write a's file", "echo b >> " + hostPath(t, d, a.name, "open")},
	} {
		cmd := exec.Command("sh", "-c", tc.script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: b.root.Uid, Gid: b.root.Gid, NoSetGroups: true}}
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("tenant b's root could %s: %s", tc.what, out)
		}
	}

	// The volume, written by a, bound to a guest of range 6.
	if out, code := guestRun(t, d, a.name, "mkdir /data/d && echo v > /data/d/f && chown 1000:1000 /data/d/f"); code != 0 {
		t.Fatalf("writing a's volume: %d %s", code, out)
	}
	if err := d.Destroy(t.Context(), a.name); err != nil {
		t.Fatal(err)
	}
	if mounted(t, d.guestDir(a.name)) || mounted(t, d.imageMount(a.name)) {
		t.Errorf("a mount of %s outlived it", a.name)
	}
	spec := busybox("tenant-c")
	spec.IDRange = 6
	spec.Mounts = []drivers.Mount{{Source: vol, Target: "/data"}}
	if err := d.Create(t.Context(), spec, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(t.Context(), spec.Name); err != nil {
		t.Fatal(err)
	}
	c, _ := d.ids.idmap(6)
	for rel, want := range map[string]int64{"d": c.UID, "d/f": c.UID + 1000} {
		if uid, _ := owner(t, filepath.Join(vol, rel)); uid != want {
			t.Errorf("the volume's %s belongs to host uid %d after binding it to range 6, want %d", rel, uid, want)
		}
	}
	if out, code := guestRun(t, d, spec.Name, "echo more >> /data/d/f && stat -c %u /data/d/f"); code != 0 || strings.TrimSpace(out) != "1000" {
		t.Errorf("the volume in its new guest: %d %q, want writable and uid 1000", code, out)
	}
}

// TestRemapIDs: a guest on the range every guest shared before ranges of
// their own (stacked on the image's copy shifted to it, its changes on
// its disk, a volume), moved to a range of its own while stopped, runs
// there from its next start with what it had written kept and now of
// its range; a running guest is not moved.
func TestRemapIDs(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	if d.ids == nil || d.ids.ranges < 8 {
		t.Fatalf("driver has too few id ranges (%+v, %v)", d.ids, d.idsErr)
	}
	shared, _ := d.ids.idmap(0)
	own, _ := d.ids.idmap(5)
	idmapped := d.idmapped
	// As an older corpus made it: range 0, on the shared shifted copy.
	d.idmapped = false
	spec := busybox("legacy")
	spec.DiskBytes = 64 << 20
	vol := t.TempDir()
	spec.Mounts = []drivers.Mount{{Source: vol, Target: "/data"}}
	if err := d.Create(t.Context(), spec, nil); err != nil {
		t.Fatal(err)
	}
	// Its disk goes with it (an lxc template running meanwhile may hold
	// the mount a while).
	t.Cleanup(func() { retryInUse(t, "Destroy", func() error { return d.Destroy(context.Background(), spec.Name) }) })
	d.idmapped = idmapped
	if err := d.Start(t.Context(), spec.Name); err != nil {
		t.Fatal(err)
	}
	if out, code := guestRun(t, d, spec.Name, "echo kept > /root/note && echo data > /data/f && chown 1000 /data/f"); code != 0 {
		t.Fatalf("writing in the legacy guest: %s", out)
	}
	if uid, _ := owner(t, filepath.Join(d.diskDir(spec.Name), "delta", "root", "note")); uid != shared.UID {
		t.Fatalf("the legacy guest's file belongs to %d, want the shared range's %d", uid, shared.UID)
	}
	if err := d.RemapIDs(t.Context(), spec.Name, 5); !errors.Is(err, drivers.ErrRunning) {
		t.Errorf("RemapIDs of a running guest = %v, want ErrRunning", err)
	}
	if err := d.Stop(t.Context(), spec.Name, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second changes nothing
		if err := d.RemapIDs(t.Context(), spec.Name, 5); err != nil {
			t.Fatalf("RemapIDs = %v", err)
		}
	}
	if err := d.Start(t.Context(), spec.Name); err != nil {
		t.Fatalf("Start after RemapIDs = %v", err)
	}
	pid := mustInspect(t, d, spec.Name).PID
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(strings.Fields(string(b)), " "), fmt.Sprintf("0 %d %d", own.UID, guestIDs); got != want {
		t.Errorf("uid_map after the move = %q, want %q", got, want)
	}
	if out, code := guestRun(t, d, spec.Name, "cat /root/note && echo more >> /root/note && echo more >> /data/f && touch /bin/busybox && stat -c %u /data/f"); code != 0 || !strings.HasPrefix(out, "kept") || !strings.HasSuffix(out, "1000\n") {
		t.Errorf("the moved guest's own files: %d %q, want them kept and writable", code, out)
	}
	for p, want := range map[string]int64{
		filepath.Join(d.diskDir(spec.Name), "delta", "root", "note"): own.UID,
		filepath.Join(vol, "f"): own.UID + 1000,
	} {
		if uid, _ := owner(t, p); uid != want {
			t.Errorf("%s belongs to %d after the move, want %d", p, uid, want)
		}
	}
	if m, _ := d.readMetadata(spec.Name); m.IDMap == nil || *m.IDMap != own || (idmapped && m.Base != "busybox") {
		t.Errorf("metadata after the move = %+v, want the map %+v", m, own)
	}
}

// TestBaseOf: an overlay's lower folder names its image cache, a shifted
// copy its source; anything else is refused.
func TestBaseOf(t *testing.T) {
	t.Parallel()
	d := &Driver{imgPath: "/var/lib/corpus/lxc/.images"}
	for lower, want := range map[string]string{
		"/var/lib/corpus/lxc/.images/busybox/rootfs":                          "busybox",
		"/var/lib/corpus/lxc/.images/busybox-u1000000-1000000/rootfs":         "busybox",
		"/var/lib/corpus/lxc/.images/debian-bookworm-u1065536-1065536/rootfs": "debian-bookworm",
		"/var/lib/corpus/lxc/web/image":                                       "",
		"/var/lib/corpus/lxc/.images/../web/rootfs":                           "",
		"/var/lib/corpus/lxc/.images/a/b/rootfs":                              "",
	} {
		got, err := d.baseOf(lower)
		if (err != nil) != (want == "") || got != want {
			t.Errorf("baseOf(%s) = %q, %v; want %q", lower, got, err, want)
		}
	}
}

func owner(t *testing.T, path string) (uid, gid int64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Uid), int64(st.Gid)
}

// mounted reports whether anything is mounted under dir.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			return true
		}
	}
	return false
}

// TestDestroyedByHand: lxc-destroy of a guest by hand leaves the image
// cache whole (the guest's image mount is out of its folder), and the
// next driver on the lxcpath removes the mount left behind.
func TestDestroyedByHand(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	if !d.idmapped {
		t.Skip("skipping: no idmapped mounts for overlays here")
	}
	spec := busybox("byhand")
	spec.IDRange = 2
	if err := d.Create(t.Context(), spec, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(t.Context(), spec.Name); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("lxc-destroy", "-P", d.path, "-n", spec.Name, "-f").CombinedOutput(); err != nil {
		t.Fatalf("lxc-destroy by hand: %v: %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(d.imgPath, "busybox", "rootfs", "bin", "busybox")); err != nil {
		t.Fatalf("the image cache after lxc-destroy by hand: %v", err)
	}
	if !mounted(t, d.imageMount(spec.Name)) {
		t.Fatalf("the image mount went with lxc-destroy; nothing left to sweep")
	}
	if _, err := New(Config{Path: d.path, Logger: testLogger(t)}); err != nil {
		t.Fatal(err)
	}
	if mounted(t, d.imageMount(spec.Name)) {
		t.Errorf("the image mount of a guest destroyed by hand outlived a new driver")
	}
}
