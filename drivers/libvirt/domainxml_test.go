package libvirt

import (
	"encoding/xml"
	"net/netip"
	"strings"
	"testing"
)

func TestDomainXML(t *testing.T) {
	s := vmSpec{
		DomainType: "qemu", Name: "web",
		Meta: guestMeta{ID: "g-1", Instance: "/var/lib/corpus/libvirt", Image: "debian/bookworm", Tap: "vt1", Bridge: "cbr0", Address: "10.0.0.5",
			Env: envList(map[string]string{"B": "</env><evil/>", "A": "1"})},
		MemoryBytes: 512 << 20, VCPUs: 1,
		Kernel: "/img/vmlinuz", Initrd: "/img/initrd.img", Disk: "/g/web/disk.qcow2",
		MAC: "52:54:00:01:02:03",
		Net: &guestNet{
			Address: netip.MustParsePrefix("10.0.0.5/24"), Gateway: netip.MustParseAddr("10.0.0.1"),
			Nameservers: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Search: []string{"corpus.test"},
		},
	}
	x, err := s.marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<domain type="qemu">`,
		`<memory unit="KiB">524288</memory>`,
		`<guest xmlns="urn:corpus:libvirt:guest:1">`,
		`<env name="B" value="&lt;/env&gt;&lt;evil/&gt;"></env>`,
		`<cmdline>root=/dev/vda rw console=ttyS0 panic=-1 systemd.hostname=web corpus.ip=10.0.0.5/24 corpus.gw=10.0.0.1 corpus.mac=52:54:00:01:02:03 corpus.dns=10.0.0.1 corpus.search=corpus.test</cmdline>`,
		`<interface type="ethernet">`,
		`<target dev="vt1"></target>`,
		`<target type="virtio" name="org.qemu.guest_agent.0"></target>`,
		`<controller type="usb" model="none"></controller>`,
		`<memballoon model="none"></memballoon>`,
	} {
		if !strings.Contains(x, want) {
			t.Errorf("domain XML lacks %s:\n%s", want, x)
		}
	}
	// The metadata comes back as written.
	var dom domainXML
	if err := xml.Unmarshal([]byte(x), &dom); err != nil {
		t.Fatal(err)
	}
	b, _ := xml.Marshal(dom.Metadata.Guest)
	got, err := parseMeta(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "g-1" || got.Instance != s.Meta.Instance || len(got.Env) != 2 || got.Env[1].Value != "</env><evil/>" {
		t.Errorf("parseMeta = %+v, want %+v", got, s.Meta)
	}
}

func TestDomainXMLWithoutNetwork(t *testing.T) {
	x, err := vmSpec{DomainType: "kvm", Name: "solo", MemoryBytes: 1 << 30, VCPUs: 2}.marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(x, "<interface") || strings.Contains(x, "corpus.ip") {
		t.Errorf("domain without network has an interface or address:\n%s", x)
	}
	if !strings.Contains(x, `<cpu mode="host-passthrough">`) {
		t.Errorf("kvm domain lacks host-passthrough CPU:\n%s", x)
	}
}

func TestDomainXMLVolumeDisk(t *testing.T) {
	s := vmSpec{DomainType: "qemu", Name: "db", MemoryBytes: 1 << 30, VCPUs: 1, Disk: "/g/db/disk.qcow2",
		Volumes: []vmVolume{{Meta: volumeMeta{Name: "db", Serial: "db", Target: "vdb", Path: "/srv/data"}, Device: "/g/db/volumes/db"}}}
	x, err := s.marshal()
	if err != nil {
		t.Fatal(err)
	}
	var dom domainXML
	if err := xml.Unmarshal([]byte(x), &dom); err != nil {
		t.Fatal(err)
	}
	if n := len(dom.Devices.Disks); n != 2 {
		t.Fatalf("domain has %d disks, want the root disk and the volume:\n%s", n, x)
	}
	got := dom.Devices.Disks[1]
	want := diskXML{XMLName: got.XMLName, Type: "block", Device: "disk",
		Driver: diskDriverXML{Name: "qemu", Type: "raw", Cache: "none", Discard: "unmap"},
		Source: diskSourceXML{Dev: "/g/db/volumes/db"}, Target: diskTargetXML{Dev: "vdb", Bus: "virtio"}, Serial: "db"}
	if got != want {
		t.Errorf("volume disk = %+v, want %+v", got, want)
	}
	if root := dom.Devices.Disks[0]; root.Target.Dev != "vda" || root.Source.File != s.Disk {
		t.Errorf("root disk = %+v, want vda from %s", root, s.Disk)
	}
	if !strings.HasSuffix(dom.OS.Cmdline, " corpus.vol=db:/srv/data") {
		t.Errorf("kernel command line %q does not name the volume", dom.OS.Cmdline)
	}
	if v := dom.Metadata.Guest.Volumes; len(v) != 1 || v[0] != s.Volumes[0].Meta {
		t.Errorf("metadata volumes = %+v, want %+v", v, s.Volumes[0].Meta)
	}
}

func TestVolumeSerial(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"db", "db"},
		{"a-volume-of-20-chars", "a-volume-of-20-chars"},
	} {
		if got := volumeSerial(tc.name); got != tc.want {
			t.Errorf("volumeSerial(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	long := volumeSerial("a-volume-with-a-much-longer-name")
	if len(long) != serialMax || long == volumeSerial("a-volume-with-a-much-longer-name2") {
		t.Errorf("volumeSerial of long names = %q: want %d bytes telling names apart", long, serialMax)
	}
}
