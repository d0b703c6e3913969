//go:build linux && cgo

package lxc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"corpus/drivers"
	"corpus/internal/cgroupfile"
	"corpus/internal/testrun"
	"corpus/volume"
)

// guestRun runs a shell command in a guest; it returns stdout and
// stderr together and the exit code.
func guestRun(t *testing.T, d *Driver, name, script string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	code, err := d.Exec(t.Context(), name, drivers.ExecRequest{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("Exec(%q) = %v", script, err)
	}
	return out.String(), code
}

// TestUnprivilegedConfinement: a guest made without Privileged runs in a
// user namespace of the host's map, with the seccomp policy, the device
// allow-list, the masks and the process cap; what a breakout needs fails
// inside it, and what it writes belongs to its ids on the host.
func TestUnprivilegedConfinement(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	if d.ids == nil {
		t.Fatalf("driver has no id map: %v", d.idsErr)
	}
	m, err := d.ids.idmap(0)
	if err != nil {
		t.Fatal(err)
	}
	vol := t.TempDir()
	spec := busybox("jail")
	spec.Mounts = []drivers.Mount{{Source: vol, Target: "/data"}}
	if err := d.Create(t.Context(), spec, nil); err != nil {
		t.Fatalf("Create = %v", err)
	}
	if err := d.Start(t.Context(), spec.Name); err != nil {
		t.Fatalf("Start = %v", err)
	}
	st := mustInspect(t, d, spec.Name)

	// The guest's init is the map's first id on the host.
	var pst unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d", st.PID), &pst); err != nil {
		t.Fatal(err)
	}
	if int64(pst.Uid) != m.UID || int64(pst.Gid) != m.GID {
		t.Errorf("guest init runs as host %d:%d, want %d:%d", pst.Uid, pst.Gid, m.UID, m.GID)
	}
	if out, _ := guestRun(t, d, spec.Name, "cat /proc/self/uid_map"); strings.Join(strings.Fields(out), " ") != fmt.Sprintf("0 %d %d", m.UID, guestIDs) {
		t.Errorf("uid_map in the guest = %q, want 0 %d %d", out, m.UID, guestIDs)
	}

	var root unix.Stat_t
	if err := unix.Stat("/", &root); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ what, script string }{
		{"mknod of the host's disk", fmt.Sprintf("mknod /tmp/disk b %d %d && mount /tmp/disk /mnt", unix.Major(root.Dev), unix.Minor(root.Dev))},
		{"mount of a disk-backed file system", "mount -t ext4 /dev/null /mnt"},
		{"write /proc/sysrq-trigger", "echo h > /proc/sysrq-trigger"},
		{"write a kernel setting", "echo 1 > /proc/sys/kernel/sysrq"},
		{"open a block device", "mknod /tmp/b b 7 0 2>/dev/null; head -c1 /tmp/b"},
		{"read kernel memory", "test -s /proc/kcore || head -c1 /proc/kcore | grep -q ."},
		{"set the clock", "date -s 2001-01-01 >/dev/null 2>&1; test $(date +%Y) = 2001"},
	} {
		if out, code := guestRun(t, d, spec.Name, tc.script); code == 0 {
			t.Errorf("%s succeeded in an unprivileged guest: %s", tc.what, out)
		}
	}
	if out, _ := guestRun(t, d, spec.Name, "grep Seccomp: /proc/self/status"); !strings.Contains(out, "2") {
		t.Errorf("guest processes run without the seccomp filter: %q", out)
	}
	if got := hostPidsMax(t, st.PID); got != fmt.Sprint(pidsMax) {
		t.Errorf("pids.max of the guest = %q, want %d", got, pidsMax)
	}

	// What the guest's root writes, in its root file system or volume,
	// is the map's on the host, and the guest can write its volume.
	if out, code := guestRun(t, d, spec.Name, "echo x > /root-file && echo y > /data/file && head -c1 /dev/null && head -c1 /dev/urandom >/dev/null"); code != 0 {
		t.Fatalf("writing files and using allowed devices in the guest: %d %s", code, out)
	}
	for _, p := range []string{filepath.Join(vol, "file"), hostPath(t, d, spec.Name, "root-file")} {
		var fst unix.Stat_t
		if err := unix.Stat(p, &fst); err != nil {
			t.Fatal(err)
		}
		if int64(fst.Uid) != m.UID {
			t.Errorf("%s belongs to host uid %d, want %d", p, fst.Uid, m.UID)
		}
	}
}

// hostPidsMax reads the process cap of pid's cgroup on the host.
func hostPidsMax(t *testing.T, pid int) string {
	t.Helper()
	v, err := cgroupfile.Read(pid, "pids", "pids.max")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// hostPath is where a file the guest wrote at /rel lives on the host.
func hostPath(t *testing.T, d *Driver, name, rel string) string {
	t.Helper()
	for _, p := range []string{filepath.Join(d.guestDir(name), "overlay", "delta", rel), filepath.Join(d.guestDir(name), "rootfs", rel)} {
		if _, err := os.Lstat(p); err == nil {
			return p
		}
	}
	t.Fatalf("no host file for %s of %s", rel, name)
	return ""
}

// TestPrivilegedGuest: Privileged runs the guest as the host's root, the
// rest of the confinement kept.
func TestPrivilegedGuest(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	spec := busybox("ops")
	spec.Privileged = true
	if err := d.Create(t.Context(), spec, nil); err != nil {
		t.Fatalf("Create = %v", err)
	}
	if err := d.Start(t.Context(), spec.Name); err != nil {
		t.Fatalf("Start = %v", err)
	}
	if out, _ := guestRun(t, d, spec.Name, "cat /proc/self/uid_map"); strings.Join(strings.Fields(out), " ") != "0 0 4294967295" {
		t.Errorf("uid_map in a privileged guest = %q, want the host's", out)
	}
	if out, _ := guestRun(t, d, spec.Name, "grep Seccomp: /proc/self/status"); !strings.Contains(out, "2") {
		t.Errorf("privileged guest runs without the seccomp filter: %q", out)
	}
	if got := hostPidsMax(t, mustInspect(t, d, spec.Name).PID); got != fmt.Sprint(pidsMax) {
		t.Errorf("pids.max of a privileged guest = %q, want %d", got, pidsMax)
	}
}

// TestShift: shift moves a tree's ids into the map, from the image's
// ids or another range's, keeps set-id bits and symbolic links'
// targets, leaves ids already mapped and ids of no range, and shifted
// tells a finished tree.
func TestShift(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("skipping: chown needs root")
	}
	dir := t.TempDir()
	h := hostIDs{uid: subrange{2_000_000, 10 * guestIDs}, gid: subrange{3_000_000, 10 * guestIDs}, ranges: 9}
	m, err := h.idmap(4)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := h.idmap(1)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a/b/suid"), []byte("x"), 0o755))
	must(os.Chmod(filepath.Join(dir, "a/b/suid"), 0o4755|os.ModeSetuid))
	must(os.WriteFile(filepath.Join(dir, "a/user"), nil, 0o644))
	must(os.Chown(filepath.Join(dir, "a/user"), 1000, 1000))
	must(os.WriteFile(filepath.Join(dir, "a/mapped"), nil, 0o644))
	must(os.Chown(filepath.Join(dir, "a/mapped"), int(m.UID+5), int(m.GID+5)))
	must(os.WriteFile(filepath.Join(dir, "a/other"), nil, 0o644))
	must(os.Chown(filepath.Join(dir, "a/other"), int(other.UID+33), int(other.GID+34)))
	must(os.WriteFile(filepath.Join(dir, "a/stranger"), nil, 0o644))
	must(os.Chown(filepath.Join(dir, "a/stranger"), 700_000, 700_001))
	must(os.Symlink("/etc/passwd", filepath.Join(dir, "link")))

	if ok, _ := shifted(dir, m); ok {
		t.Fatal("shifted before shift")
	}
	for range 2 { // a second run changes nothing
		must(h.shift(dir, m))
	}
	for _, tc := range []struct {
		path     string
		uid, gid int64
	}{
		{"", m.UID, m.GID}, {"a/b/suid", m.UID, m.GID}, {"a/user", m.UID + 1000, m.GID + 1000},
		{"a/mapped", m.UID + 5, m.GID + 5}, {"a/other", m.UID + 33, m.GID + 34},
		{"a/stranger", 700_000, 700_001}, {"link", m.UID, m.GID},
	} {
		var st unix.Stat_t
		must(unix.Lstat(filepath.Join(dir, tc.path), &st))
		if int64(st.Uid) != tc.uid || int64(st.Gid) != tc.gid {
			t.Errorf("%s: %d:%d after shift, want %d:%d", tc.path, st.Uid, st.Gid, tc.uid, tc.gid)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "a/b/suid"))
	must(err)
	if fi.Mode()&os.ModeSetuid == 0 {
		t.Errorf("set-uid bit lost by shift: %v", fi.Mode())
	}
	var passwd unix.Stat_t
	must(unix.Lstat("/etc/passwd", &passwd))
	if passwd.Uid != 0 {
		t.Errorf("shift followed a symbolic link out of the tree: /etc/passwd is %d", passwd.Uid)
	}
	if ok, err := shifted(dir, m); !ok || err != nil {
		t.Errorf("shifted after shift = %v, %v", ok, err)
	}
}

// TestSubordinate: root's range is read from the file, and added after
// every other one when missing.
func TestSubordinate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file string
		want       subrange
		wantFile   string
	}{
		{"missing file", "", subrange{idmapStart, idmapHostRange}, "root:1000000:1000000000\n"},
		{"root present", "alice:100000:65536\nroot:500000:65536\n", subrange{500000, 65536}, "alice:100000:65536\nroot:500000:65536\n"},
		{"root too small", "root:100000:1000\nbob:2000000:65536", subrange{2065536, idmapHostRange}, "root:100000:1000\nbob:2000000:65536\nroot:2065536:1000000000\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "subuid")
			if tc.file != "" {
				if err := os.WriteFile(p, []byte(tc.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := subordinate(p)
			if err != nil || got != tc.want {
				t.Fatalf("subordinate = %+v, %v; want %+v", got, err, tc.want)
			}
			b, _ := os.ReadFile(p)
			if string(b) != tc.wantFile {
				t.Errorf("file after = %q, want %q", b, tc.wantFile)
			}
		})
	}
}

// TestDiskLimit: what a guest writes to its root file system fills its
// own disk, never the host's: past the limit it gets ENOSPC, the host's
// free space stays, and the disk goes with the guest.
func TestDiskLimit(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	if d.disks == nil {
		t.Fatal("the driver has no disk backend here")
	}
	spec := busybox("small")
	spec.DiskBytes = 64 << 20
	if err := d.Create(t.Context(), spec, nil); err != nil {
		t.Fatalf("Create = %v", err)
	}
	if err := d.Start(t.Context(), spec.Name); err != nil {
		t.Fatalf("Start = %v", err)
	}
	out, code := guestRun(t, d, spec.Name, "dd if=/dev/zero of=/fill bs=1M count=200 2>&1; sync")
	if code == 0 && !strings.Contains(out, "No space left") {
		t.Fatalf("writing 200 MiB into a 64 MiB guest: %q, want ENOSPC", out)
	}
	if !strings.Contains(out, "No space left") {
		t.Errorf("dd past the disk limit said %q, want No space left on device", out)
	}
	// Where the bytes went, read from the host: the filled file is on
	// the guest's disk (another device than the host's file system) and
	// the disk's image holds no more than its size. (The host's free
	// space is not compared: CI's other lanes write to it meanwhile.)
	var host, fill unix.Stat_t
	if err := unix.Stat(d.path, &host); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(filepath.Join(d.diskDir(spec.Name), "delta", "fill"), &fill); err != nil {
		t.Fatalf("the filled file is not on the guest's disk: %v", err)
	}
	if fill.Dev == host.Dev {
		t.Errorf("the guest's file is on the host's file system (device %d)", host.Dev)
	}
	if fill.Size > 64<<20 {
		t.Errorf("the guest wrote %d MiB past a 64 MiB disk", fill.Size>>20)
	}
	img, err := d.disks.ImagePath(spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(img, &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > 64<<20 {
		t.Errorf("the disk's image holds %d MiB on the host, more than its 64 MiB", used>>20)
	}
	// The guest still works after its disk filled, and freeing space
	// makes room again.
	if out, code := guestRun(t, d, spec.Name, "rm /fill && echo ok > /after"); code != 0 {
		t.Errorf("freeing the guest's disk: %d %s", code, out)
	}
	// A restart finds the disk (mounted again when needed).
	if err := d.Stop(t.Context(), spec.Name, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// An lxc template running meanwhile (another test's image build)
	// holds a copy of the mount in its own mount namespace until it
	// ends; the unmount waits for it, as the agent's retries would.
	retryInUse(t, "unmounting the disk", func() error { return d.disks.Unmount(t.Context(), spec.Name) })
	if err := d.Start(t.Context(), spec.Name); err != nil {
		t.Fatalf("Start with the disk unmounted = %v", err)
	}
	if out, _ := guestRun(t, d, spec.Name, "cat /after"); out != "ok\n" {
		t.Errorf("a file written before the restart reads %q", out)
	}
	retryInUse(t, "Destroy", func() error { return d.Destroy(t.Context(), spec.Name) })
	if _, err := d.disks.Stat(t.Context(), spec.Name); err == nil {
		t.Error("the guest's disk outlived it")
	}
}

// TestLegacyGuestConfined: a guest an older corpus made privileged (its
// metadata says neither privileged nor mapped) is unprivileged from its
// next start, with what it had written kept and now its own.
func TestLegacyGuestConfined(t *testing.T) {
	t.Parallel()
	d := newTestDriver(t)
	spec := busybox("old")
	spec.Privileged = true
	vol := t.TempDir()
	spec.Mounts = []drivers.Mount{{Source: vol, Target: "/data"}}
	if err := d.Create(t.Context(), spec, nil); err != nil {
		t.Fatalf("Create = %v", err)
	}
	if err := d.Start(t.Context(), spec.Name); err != nil {
		t.Fatal(err)
	}
	if out, code := guestRun(t, d, spec.Name, "echo kept > /root/note && echo data > /data/f"); code != 0 {
		t.Fatalf("writing as the privileged guest: %s", out)
	}
	if err := d.Stop(t.Context(), spec.Name, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// What an older corpus wrote: no privileged mark, no mounts listed.
	m, err := d.readMetadata(spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	m.Privileged, m.Mounts = false, nil
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(d.guestDir(spec.Name), metadataFile), b, 0o644); err != nil {
		t.Fatal(err)
	}

	if err := d.Start(t.Context(), spec.Name); err != nil {
		t.Fatalf("Start of a legacy guest = %v", err)
	}
	shared, _ := d.ids.idmap(0)
	want := fmt.Sprintf("0 %d %d", shared.UID, guestIDs)
	if out, _ := guestRun(t, d, spec.Name, "cat /proc/self/uid_map"); strings.Join(strings.Fields(out), " ") != want {
		t.Errorf("uid_map of the legacy guest after its start = %q, want %s", out, want)
	}
	if out, code := guestRun(t, d, spec.Name, "cat /root/note && echo more >> /root/note && echo more >> /data/f"); code != 0 || !strings.HasPrefix(out, "kept") {
		t.Errorf("the confined guest's own files: %d %q, want them kept and writable", code, out)
	}
	if m, _ := d.readMetadata(spec.Name); m.IDMap == nil || len(m.Mounts) != 1 {
		t.Errorf("metadata after confining = %+v, want the map and the volume", m)
	}
}

// retryInUse retries f while it fails with volume.ErrInUse, for up to
// five minutes: what holds the disk is most often a copy of its mount in
// the mount namespace of an LXC template that another test (or test
// process) runs, which lets go when that image build ends (minutes, for
// a debootstrap on a loaded machine).
func retryInUse(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(testrun.D(5 * time.Minute))
	for {
		err := f()
		if err == nil {
			return
		}
		if !errors.Is(err, volume.ErrInUse) || time.Now().After(deadline) {
			t.Fatalf("%s = %v", what, err)
		}
		time.Sleep(time.Second)
	}
}
