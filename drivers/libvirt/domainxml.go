package libvirt

import (
	"crypto/sha256"
	"encoding/xml"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// metadataNS names corpus's element in a domain's <metadata>.
const metadataNS = "urn:corpus:libvirt:guest:1"

// domainXML is the subset of libvirt's domain XML the driver writes. It
// is marshalled with encoding/xml, so values taken from a guest's spec
// are always escaped, never pasted into markup.
type domainXML struct {
	XMLName    xml.Name     `xml:"domain"`
	Type       string       `xml:"type,attr"`
	Name       string       `xml:"name"`
	Metadata   *metadataXML `xml:"metadata,omitempty"`
	Memory     sizeXML      `xml:"memory"`
	VCPU       int          `xml:"vcpu"`
	OS         osXML        `xml:"os"`
	Features   featuresXML  `xml:"features"`
	CPU        *cpuXML      `xml:"cpu,omitempty"`
	OnPoweroff string       `xml:"on_poweroff"`
	OnReboot   string       `xml:"on_reboot"`
	OnCrash    string       `xml:"on_crash"`
	Devices    devicesXML   `xml:"devices"`
}

type metadataXML struct {
	Guest guestMeta `xml:"urn:corpus:libvirt:guest:1 guest"`
}

// guestMeta is what the driver keeps about a guest inside its domain, so
// it can find and restart its guests without any file of its own.
//
// It is written as <guest xmlns="urn:corpus:libvirt:guest:1"> (the tag on
// metadataXML.Guest); libvirt returns the element without its namespace,
// so guestMeta itself names none.
type guestMeta struct {
	ID       string `xml:"id"`
	Instance string `xml:"instance"`
	Image    string `xml:"image"`
	// CPUMillis is the CPU limit asked for; the domain has it rounded up
	// to whole vCPUs.
	CPUMillis int64 `xml:"cpu_millis,omitempty"`
	// Address, Bridge and Tap describe the guest's network interface,
	// which Start puts on the bridge.
	Address string `xml:"address,omitempty"`
	Bridge  string `xml:"bridge,omitempty"`
	Tap     string `xml:"tap,omitempty"`
	// Env is the guest's environment, given to every Exec.
	Env []envXML `xml:"env"`
	// Volumes are the guest's volumes, each a virtio disk.
	Volumes []volumeMeta `xml:"volume"`
}

// volumeMeta is one volume disk of a guest: the corpus volume, the disk
// serial the guest finds it by (/dev/disk/by-id/virtio-SERIAL), its
// target in the domain and where the guest mounts it.
type volumeMeta struct {
	Name   string `xml:"name,attr"`
	Serial string `xml:"serial,attr"`
	Target string `xml:"target,attr"`
	Path   string `xml:"path,attr"`
}

type envXML struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

// envList returns env as metadata entries, sorted by name.
func envList(env map[string]string) []envXML {
	out := make([]envXML, 0, len(env))
	for k, v := range env {
		out = append(out, envXML{Name: k, Value: v})
	}
	slices.SortFunc(out, func(a, b envXML) int { return strings.Compare(a.Name, b.Name) })
	return out
}

type sizeXML struct {
	Unit  string `xml:"unit,attr"`
	Value int64  `xml:",chardata"`
}

type osXML struct {
	Type    osTypeXML `xml:"type"`
	Kernel  string    `xml:"kernel,omitempty"`
	Initrd  string    `xml:"initrd,omitempty"`
	Cmdline string    `xml:"cmdline,omitempty"`
}

type osTypeXML struct {
	Arch  string `xml:"arch,attr,omitempty"`
	Value string `xml:",chardata"`
}

type featuresXML struct {
	ACPI *struct{} `xml:"acpi"`
}

type cpuXML struct {
	Mode     string          `xml:"mode,attr"`
	Features []cpuFeatureXML `xml:"feature"`
}

type cpuFeatureXML struct {
	Policy string `xml:"policy,attr"`
	Name   string `xml:"name,attr"`
}

type devicesXML struct {
	Disks       []diskXML       `xml:"disk"`
	Controllers []controllerXML `xml:"controller"`
	Interfaces  []interfaceXML  `xml:"interface"`
	Serials     []serialXML     `xml:"serial"`
	Channels    []channelXML    `xml:"channel"`
	RNG         *rngXML         `xml:"rng,omitempty"`
	MemBalloon  *memBalloonXML  `xml:"memballoon,omitempty"`
}

type controllerXML struct {
	Type  string `xml:"type,attr"`
	Model string `xml:"model,attr,omitempty"`
}

type memBalloonXML struct {
	Model string `xml:"model,attr"`
}

type diskXML struct {
	XMLName xml.Name      `xml:"disk"`
	Type    string        `xml:"type,attr"`
	Device  string        `xml:"device,attr"`
	Driver  diskDriverXML `xml:"driver"`
	Source  diskSourceXML `xml:"source"`
	Target  diskTargetXML `xml:"target"`
	Serial  string        `xml:"serial,omitempty"`
}

type diskDriverXML struct {
	Name    string `xml:"name,attr"`
	Type    string `xml:"type,attr"`
	Cache   string `xml:"cache,attr,omitempty"`
	Discard string `xml:"discard,attr,omitempty"`
}

// diskSourceXML is a disk's backing: a file (type "file") or a host
// block device (type "block").
type diskSourceXML struct {
	File string `xml:"file,attr,omitempty"`
	Dev  string `xml:"dev,attr,omitempty"`
}

type diskTargetXML struct {
	Dev string `xml:"dev,attr"`
	Bus string `xml:"bus,attr"`
}

type interfaceXML struct {
	Type   string   `xml:"type,attr"`
	MAC    attrXML  `xml:"mac"`
	Target tapXML   `xml:"target"`
	Model  modelXML `xml:"model"`
}

type attrXML struct {
	Address string `xml:"address,attr"`
}

type tapXML struct {
	Dev string `xml:"dev,attr"`
}

type modelXML struct {
	Type string `xml:"type,attr"`
}

type serialXML struct {
	Type string  `xml:"type,attr"`
	Log  *logXML `xml:"log,omitempty"`
}

type logXML struct {
	File   string `xml:"file,attr"`
	Append string `xml:"append,attr"`
}

type channelXML struct {
	Type   string           `xml:"type,attr"`
	Target channelTargetXML `xml:"target"`
}

type channelTargetXML struct {
	Type string `xml:"type,attr"`
	Name string `xml:"name,attr"`
}

type rngXML struct {
	Model   string     `xml:"model,attr"`
	Backend backendXML `xml:"backend"`
}

type backendXML struct {
	Model string `xml:"model,attr"`
	Value string `xml:",chardata"`
}

// guestAgentChannel is the virtio-serial port qemu-guest-agent listens on.
const guestAgentChannel = "org.qemu.guest_agent.0"

// vmSpec is everything a domain is generated from; the driver fills it
// from a guest's spec, its image and the host.
type vmSpec struct {
	DomainType  string // "kvm", "qemu" (TCG) or "test"
	Name        string
	Meta        guestMeta
	MemoryBytes int64
	VCPUs       int
	Kernel      string
	Initrd      string
	Disk        string // qcow2 root disk
	Volumes     []vmVolume
	ConsoleLog  string // file receiving the serial console, "" for none
	MAC         string // "" for no network
	Net         *guestNet
	// CPUOff are host CPU features a kvm guest does not get (see
	// nestedCPUOff).
	CPUOff []string
}

// vmVolume is a volume given to the guest as a virtio disk backed by a
// host block device.
type vmVolume struct {
	Meta   volumeMeta
	Device string // host block device, /dev/loopN
}

// disk is the domain's disk of volume v.
func (v vmVolume) disk() diskXML {
	return diskXML{
		Type: "block", Device: "disk",
		// No host page cache: the host reads the device's superblock
		// (size, used bytes) and must see what the guest wrote.
		Driver: diskDriverXML{Name: "qemu", Type: "raw", Cache: "none", Discard: "unmap"},
		Source: diskSourceXML{Dev: v.Device},
		Target: diskTargetXML{Dev: v.Meta.Target, Bus: "virtio"},
		Serial: v.Meta.Serial,
	}
}

// serialMax is the longest disk serial virtio-blk passes to the guest.
const serialMax = 20

// volumeSerial is the disk serial of volume name, by which the guest
// finds its disk (/dev/disk/by-id/virtio-SERIAL): the name itself when
// it fits, else its start and a hash of the whole.
func volumeSerial(name string) string {
	if len(name) <= serialMax {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return fmt.Sprintf("%s-%x", name[:serialMax-9], sum[:4])
}

// volumeTarget is the domain target of a guest's i-th volume: vdb, vdc,
// ... (vda is the root disk).
func volumeTarget(i int) string { return "vd" + string(rune('b'+i)) }

// guestNet is the guest's static network configuration, given to it on
// the kernel command line.
type guestNet struct {
	Address     netip.Prefix
	Gateway     netip.Addr
	Nameservers []netip.Addr
	Search      []string
}

// domain returns the libvirt description of s.
func (s vmSpec) domain() domainXML {
	meta := s.Meta
	d := domainXML{
		Type:       s.DomainType,
		Name:       s.Name,
		Metadata:   &metadataXML{Guest: meta},
		Memory:     sizeXML{Unit: "KiB", Value: s.MemoryBytes / 1024},
		VCPU:       s.VCPUs,
		Features:   featuresXML{ACPI: &struct{}{}},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		OS: osXML{
			Type:    osTypeXML{Arch: "x86_64", Value: "hvm"},
			Kernel:  s.Kernel,
			Initrd:  s.Initrd,
			Cmdline: s.cmdline(),
		},
		Devices: devicesXML{
			Disks: []diskXML{{
				Type: "file", Device: "disk",
				Driver: diskDriverXML{Name: "qemu", Type: "qcow2"},
				Source: diskSourceXML{File: s.Disk},
				Target: diskTargetXML{Dev: "vda", Bus: "virtio"},
			}},
			Channels: []channelXML{{
				Type:   "unix",
				Target: channelTargetXML{Type: "virtio", Name: guestAgentChannel},
			}},
			RNG: &rngXML{Model: "virtio", Backend: backendXML{Model: "random", Value: "/dev/urandom"}},
			// No USB controller and no balloon, which libvirt adds unless
			// told: nothing uses them, and under emulation (TCG) probing
			// them costs boot CPU (measured: 45 CPU s to an idle login
			// with them, 38 without).
			Controllers: []controllerXML{{Type: "usb", Model: "none"}},
			MemBalloon:  &memBalloonXML{Model: "none"},
		},
	}
	for _, v := range s.Volumes {
		d.Devices.Disks = append(d.Devices.Disks, v.disk())
		d.Metadata.Guest.Volumes = append(d.Metadata.Guest.Volumes, v.Meta)
	}
	if s.DomainType == "kvm" {
		d.CPU = &cpuXML{Mode: "host-passthrough"}
		for _, f := range s.CPUOff {
			d.CPU.Features = append(d.CPU.Features, cpuFeatureXML{Policy: "disable", Name: f})
		}
	}
	serial := serialXML{Type: "pty"}
	if s.ConsoleLog != "" {
		serial.Log = &logXML{File: s.ConsoleLog, Append: "off"}
	}
	d.Devices.Serials = []serialXML{serial}
	if s.MAC != "" {
		d.Devices.Interfaces = []interfaceXML{{
			Type:   "ethernet",
			MAC:    attrXML{Address: s.MAC},
			Target: tapXML{Dev: s.Meta.Tap},
			Model:  modelXML{Type: "virtio"},
		}}
	}
	return d
}

// cmdline is the guest kernel's command line: the root disk, the serial
// console, the static network for the image's corpus-net unit and the
// volumes for its corpus-volumes unit. Every value comes from a typed
// address, a validated name or a validated path, so none can add a
// parameter of its own.
func (s vmSpec) cmdline() string {
	args := []string{"root=/dev/vda", "rw", "console=ttyS0", "panic=-1", "systemd.hostname=" + s.Name}
	if n := s.Net; n != nil {
		args = append(args,
			"corpus.ip="+n.Address.String(),
			"corpus.gw="+n.Gateway.String(),
			"corpus.mac="+s.MAC)
		if len(n.Nameservers) > 0 {
			dns := make([]string, len(n.Nameservers))
			for i, a := range n.Nameservers {
				dns[i] = a.String()
			}
			args = append(args, "corpus.dns="+strings.Join(dns, ","))
		}
		if len(n.Search) > 0 {
			args = append(args, "corpus.search="+strings.Join(n.Search, ","))
		}
	}
	for _, v := range s.Volumes {
		args = append(args, "corpus.vol="+v.Meta.Serial+":"+v.Meta.Path)
	}
	return strings.Join(args, " ")
}

// marshal returns s's domain XML.
func (s vmSpec) marshal() (string, error) {
	b, err := xml.MarshalIndent(s.domain(), "", "  ")
	if err != nil {
		return "", fmt.Errorf("encoding domain %s: %w", s.Name, err)
	}
	return string(b), nil
}

// parseMeta decodes corpus's metadata element as libvirt returns it.
func parseMeta(s string) (guestMeta, error) {
	var m guestMeta
	if err := xml.Unmarshal([]byte(s), &m); err != nil {
		return guestMeta{}, fmt.Errorf("decoding corpus metadata: %w", err)
	}
	return m, nil
}
