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
