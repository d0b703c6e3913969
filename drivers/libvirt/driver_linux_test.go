//go:build linux

package libvirt

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"corpus/drivers"
	"corpus/drivers/libvirt/libvirttest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	libvirttest.Stop()
	os.Exit(code)
}

const testURI = "test:///default"

// testDriver returns a driver on libvirt's test hypervisor whose image
// folder holds a fake debian/bookworm, and a connection of the test's
// own that keeps test:///default's state alive for the whole test.
func testDriver(t *testing.T, instance string) (*Driver, *golibvirt.Libvirt, string) {
	t.Helper()
	libvirttest.Ensure(t)
	hand := libvirttest.Connect(t, testURI)
	images := t.TempDir()
	if err := WriteTestImage(images, "debian/bookworm"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	d := newTestDriver(t, dir, images, instance)
	return d, hand, images
}

func newTestDriver(t *testing.T, dir, images, instance string) *Driver {
	t.Helper()
	d, err := New(Config{URI: testURI, Dir: dir, ImageDir: images, Instance: instance})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// cleanupGuest destroys the guest when the test ends, whatever happened.
func cleanupGuest(t *testing.T, d *Driver, name string) {
	t.Cleanup(func() {
		if err := d.Destroy(context.Background(), name); err != nil {
			t.Errorf("cleanup: destroying %s: %v", name, err)
		}
	})
}

func testSpec(name, id string) drivers.GuestSpec {
	return drivers.GuestSpec{
		ID: id, Name: name, Image: "debian/bookworm",
		MemoryBytes: 256 << 20, CPUMillis: 1500,
		Env: map[string]string{"GREETING": "hello <world> & 'friends'"},
		Network: &drivers.Network{
			Bridge:  "cbr-test",
			Address: netip.MustParsePrefix("10.77.0.5/24"),
			Gateway: netip.MustParseAddr("10.77.0.1"),
		},
	}
}

func TestLifecycleOnTestHypervisor(t *testing.T) {
	d, hand, images := testDriver(t, t.Name())
	ctx := context.Background()
	const name = "lv-life"
	cleanupGuest(t, d, name)

	var progress []string
	if err := d.Create(ctx, testSpec(name, "id-1"), func(m string) { progress = append(progress, m) }); err != nil {
		t.Fatalf("Create: %v", err)
	}
	st, err := d.Inspect(ctx, name)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	want := drivers.GuestStatus{ID: "id-1", Name: name, Image: "debian/bookworm", State: drivers.StateStopped,
		MemoryBytes: 256 << 20, CPUMillis: 1500, Address: "10.77.0.5"}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("Inspect = %+v, want %+v", st, want)
	}
	if _, err := os.Stat(filepath.Join(d.guestDir(name), "disk.qcow2")); err != nil {
		t.Fatalf("guest disk: %v", err)
	}

	// The domain libvirt holds is the one the driver described.
	dom, err := hand.DomainLookupByName(name)
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, vcpus, _, err := hand.DomainGetInfo(dom)
	if err != nil || vcpus != 2 {
		t.Errorf("domain vcpus = %d, %v; want 2 (1500 millicores rounded up)", vcpus, err)
	}

	if err := d.Create(ctx, testSpec(name, "id-1"), nil); err != nil {
		t.Errorf("Create again with the same id = %v, want nil", err)
	}
	if err := d.Create(ctx, testSpec(name, "id-2"), nil); !errors.Is(err, drivers.ErrExists) {
		t.Errorf("Create with another id = %v, want ErrExists", err)
	}

	for range 2 { // the second Start is a no-op
		if err := d.Start(ctx, name); err != nil {
			t.Fatalf("Start: %v", err)
		}
		if st, _ := d.Inspect(ctx, name); st.State != drivers.StateRunning {
			t.Fatalf("state after Start = %s, want running", st.State)
		}
	}

	// Another instance on the same libvirtd does not see the guest; a
	// new driver of this instance (an agent restart) does.
	other := newTestDriver(t, t.TempDir(), images, t.Name()+"-other")
	if list, err := other.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("other instance's List = %v, %v; want none", list, err)
	}
	if _, err := other.Inspect(ctx, name); !errors.Is(err, drivers.ErrNotFound) {
		t.Errorf("other instance's Inspect = %v, want ErrNotFound", err)
	}
	if err := other.Destroy(ctx, name); err != nil {
		t.Errorf("other instance's Destroy = %v, want nil (not its guest)", err)
	}
	d.Close()
	again := newTestDriver(t, d.dir, images, t.Name())
	list, err := again.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "id-1" || list[0].State != drivers.StateRunning {
		t.Fatalf("List after restart = %+v, want the running guest id-1", list)
	}

	if err := again.Stop(ctx, name, 5*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if st, _ := again.Inspect(ctx, name); st.State != drivers.StateStopped {
		t.Fatalf("state after Stop = %s, want stopped", st.State)
	}
	if err := again.Stop(ctx, name, time.Second); err != nil {
		t.Errorf("Stop of a stopped guest = %v, want nil", err)
	}
	if _, err := again.Exec(ctx, name, drivers.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, drivers.ErrNotRunning) {
		t.Errorf("Exec in a stopped guest = %v, want ErrNotRunning", err)
	}

	if err := again.Destroy(ctx, name); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if _, err := again.Inspect(ctx, name); !errors.Is(err, drivers.ErrNotFound) {
		t.Errorf("Inspect after Destroy = %v, want ErrNotFound", err)
	}
	if _, err := hand.DomainLookupByName(name); !golibvirt.IsNotFound(err) {
		t.Errorf("domain after Destroy: lookup = %v, want not found", err)
	}
	if _, err := os.Stat(again.guestDir(name)); !os.IsNotExist(err) {
		t.Errorf("guest folder after Destroy: %v, want gone", err)
	}
	if err := again.Destroy(ctx, name); err != nil {
		t.Errorf("Destroy of a missing guest = %v, want nil", err)
	}
}

// A domain someone else defined is never listed, destroyed or replaced.
func TestForeignDomainIsLeftAlone(t *testing.T) {
	d, hand, _ := testDriver(t, t.Name())
	ctx := context.Background()
	const name = "lv-foreign"
	dom, err := hand.DomainDefineXML(`<domain type='test'><name>` + name + `</name><memory>65536</memory><os><type>hvm</type></os></domain>`)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hand.DomainUndefine(dom) })

	list, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(list, func(s drivers.GuestStatus) bool { return s.Name == name }) {
		t.Errorf("List = %+v, includes the foreign domain", list)
	}
	if _, err := d.Inspect(ctx, name); !errors.Is(err, drivers.ErrNotFound) {
		t.Errorf("Inspect = %v, want ErrNotFound", err)
	}
	if err := d.Destroy(ctx, name); err != nil {
		t.Errorf("Destroy = %v, want nil", err)
	}
	if _, err := hand.DomainLookupByName(name); err != nil {
		t.Errorf("foreign domain after Destroy: %v, want it still defined", err)
	}
	if err := d.Create(ctx, testSpec(name, "id-f"), nil); !errors.Is(err, drivers.ErrExists) {
		t.Errorf("Create over the foreign domain = %v, want ErrExists", err)
	}
}

func TestCreateRefusesWhatVMsCannotDo(t *testing.T) {
	d, _, _ := testDriver(t, t.Name())
	ctx := context.Background()
	mounts := testSpec("lv-mounts", "id-m")
	mounts.Mounts = []drivers.Mount{{Source: "/srv", Target: "/data"}}
	badPath := testSpec("lv-badpath", "id-p")
	badPath.BlockVolumes = []drivers.BlockVolume{{Name: "data", Device: "/dev/loop7", Path: "/srv/my data"}}
	badDev := testSpec("lv-baddev", "id-d")
	badDev.BlockVolumes = []drivers.BlockVolume{{Name: "data", Device: "/tmp/x.img", Path: "/srv/data"}}
	image := testSpec("lv-image", "id-i")
	image.Image = "busybox"
	small := testSpec("lv-small", "id-s")
	small.MemoryBytes = 16 << 20
	for _, tc := range []struct {
		name string
		spec drivers.GuestSpec
		want error
	}{
		{"mounts", mounts, drivers.ErrNotSupported},
		{"volume path", badPath, drivers.ErrInvalidSpec},
		{"volume device", badDev, drivers.ErrInvalidSpec},
		{"image", image, drivers.ErrUnknownImage},
		{"memory", small, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := d.Create(ctx, tc.spec, nil)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("Create = %v, want %v", err, tc.want)
			}
			if _, err := d.Inspect(ctx, tc.spec.Name); !errors.Is(err, drivers.ErrNotFound) {
				t.Errorf("Inspect after refused Create = %v, want ErrNotFound", err)
			}
		})
	}
	if c := d.Capabilities(); c.Volumes != drivers.BlockVolumes || !c.HostNetwork {
		t.Errorf("Capabilities() = %+v, want block volumes and HostNetwork", c)
	}
}

func TestFingerprint(t *testing.T) {
	d, _, _ := testDriver(t, t.Name())
	fp := d.Fingerprint(context.Background())
	if !fp.Healthy || fp.Attributes["libvirt.hypervisor"] != testHypervisor || fp.Attributes["libvirt.version"] == "" {
		t.Errorf("Fingerprint = %+v, want healthy on the Test hypervisor with a version", fp)
	}
	gone, err := New(Config{URI: testURI, Socket: filepath.Join(t.TempDir(), "none"), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if fp := gone.Fingerprint(context.Background()); fp.Healthy || fp.Detail == "" {
		t.Errorf("Fingerprint without libvirtd = %+v, want unhealthy with a reason", fp)
	}
}
