//go:build linux

package libvirt

import (
	"context"
	"encoding/xml"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
	"golang.org/x/sys/unix"

	"corpus/drivers"
)

// definedVolumeDisks returns the block disks of the domain's definition,
// as libvirt holds it.
func definedVolumeDisks(t *testing.T, l *golibvirt.Libvirt, name string, live bool) []diskXML {
	t.Helper()
	dom, err := l.DomainLookupByName(name)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := disks(l, dom, live)
	if err != nil {
		t.Fatal(err)
	}
	var out []diskXML
	for _, d := range ds {
		if d.Type == "block" {
			out = append(out, d)
		}
	}
	return out
}

// testLoop attaches a small loop device for the test and detaches it
// when the test ends.
func testLoop(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for loop devices and device nodes")
	}
	img := filepath.Join(t.TempDir(), "vol.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 1<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
			t.Errorf("cleanup: detaching %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

// nodeOf returns the device numbers of the block device node at path.
func nodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		t.Fatalf("%s is not a block device node", path)
	}
	return st.Rdev
}

// TestVolumeDiskOnTestHypervisor: a guest's volume is a virtio block
// disk with the volume's serial in the domain libvirt holds, its
// kernel command line names it, AttachVolume is idempotent and follows
// a new loop device (the definition stays, its device node is made
// anew), and a restarted driver finds the volume again.
func TestVolumeDiskOnTestHypervisor(t *testing.T) {
	d, hand, images := testDriver(t, t.Name())
	ctx := context.Background()
	const name = "lv-vol"
	cleanupGuest(t, d, name)
	loopA, loopB := testLoop(t), testLoop(t)
	vol := drivers.BlockVolume{Name: "lv-vol-data-with-a-long-name", Device: loopA, Path: "/srv/data"}
	spec := testSpec(name, "id-v")
	spec.BlockVolumes = []drivers.BlockVolume{vol}
	if err := d.Create(ctx, spec, nil); err != nil {
		t.Fatalf("Create: %v", err)
	}
	serial := volumeSerial(vol.Name)
	if len(serial) > serialMax || serial == volumeSerial("lv-vol-data-with-a-long-other") {
		t.Fatalf("volumeSerial(%q) = %q: longer than %d bytes or not telling names apart", vol.Name, serial, serialMax)
	}
	// The disk is the guest's device node of the volume, which has the
	// numbers of the volume's loop device.
	node := d.volumeNode(name, serial)
	want := diskXML{Type: "block", Device: "disk", Source: diskSourceXML{Dev: node}, Target: diskTargetXML{Dev: "vdb", Bus: "virtio"}, Serial: serial}
	check := func(what string, live bool, dev string) {
		t.Helper()
		got := definedVolumeDisks(t, hand, name, live)
		if len(got) != 1 || got[0].Source != want.Source || got[0].Target != want.Target || got[0].Serial != want.Serial || got[0].Driver.Type != "raw" {
			t.Fatalf("%s: volume disks = %+v, want one like %+v", what, got, want)
		}
		if got, want := nodeOf(t, node), nodeOf(t, dev); got != want {
			t.Fatalf("%s: device node %s has numbers %#x, want %#x (%s)", what, node, got, want, dev)
		}
	}
	check("after Create", false, loopA)

	dom, err := hand.DomainLookupByName(name)
	if err != nil {
		t.Fatal(err)
	}
	x, err := hand.DomainGetXMLDesc(dom, golibvirt.DomainXMLInactive)
	if err != nil {
		t.Fatal(err)
	}
	var full domainXML
	if err := xml.Unmarshal([]byte(x), &full); err != nil {
		t.Fatal(err)
	}
	if arg := "corpus.vol=" + serial + ":/srv/data"; !slices.Contains(strings.Fields(full.OS.Cmdline), arg) {
		t.Errorf("kernel command line %q lacks %s", full.OS.Cmdline, arg)
	}

	// Attaching what is there changes nothing; a new device number is
	// written in place of the old one.
	for range 2 {
		if err := d.AttachVolume(ctx, name, vol); err != nil {
			t.Fatalf("AttachVolume (unchanged): %v", err)
		}
		check("after AttachVolume of the same device", false, loopA)
	}
	moved := vol
	moved.Device = loopB
	for range 2 {
		if err := d.AttachVolume(ctx, name, moved); err != nil {
			t.Fatalf("AttachVolume (new device): %v", err)
		}
		check("after AttachVolume of a new device", false, loopB)
	}
	other := drivers.BlockVolume{Name: "not-its-volume", Device: loopA, Path: "/srv/data"}
	if err := d.AttachVolume(ctx, name, other); !errors.Is(err, drivers.ErrNotSupported) {
		t.Errorf("AttachVolume of a volume the guest was created without = %v, want ErrNotSupported", err)
	}

	if err := d.Start(ctx, name); err != nil {
		t.Fatalf("Start: %v", err)
	}
	check("running", true, loopB)
	if err := d.AttachVolume(ctx, name, moved); err != nil {
		t.Fatalf("AttachVolume (running): %v", err)
	}
	check("running, after AttachVolume", true, loopB)

	// A restarted driver (agent) finds the guest and its volume.
	d.Close()
	again := newTestDriver(t, d.dir, images, t.Name())
	list, err := again.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "id-v" || list[0].State != drivers.StateRunning {
		t.Fatalf("List after restart = %+v, %v; want the running guest id-v", list, err)
	}
	l, err := again.client()
	if err != nil {
		t.Fatal(err)
	}
	_, meta, err := again.lookup(l, name)
	if err != nil {
		t.Fatal(err)
	}
	if vm, ok := volumeOf(meta, vol.Name); !ok || vm.Serial != serial || vm.Target != "vdb" || vm.Path != "/srv/data" {
		t.Errorf("volume in the metadata after restart = %+v, %v; want serial %s on vdb at /srv/data", vm, ok, serial)
	}
	if err := again.AttachVolume(ctx, name, moved); err != nil {
		t.Fatalf("AttachVolume after restart: %v", err)
	}
	check("after restart", false, loopB)
	if err := again.Stop(ctx, name, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := again.GrowVolume(ctx, name, moved, 1<<30); !errors.Is(err, drivers.ErrNotRunning) {
		t.Errorf("GrowVolume of a stopped guest = %v, want ErrNotRunning", err)
	}
}
