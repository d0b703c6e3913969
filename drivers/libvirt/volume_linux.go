//go:build linux

package libvirt

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"
	"golang.org/x/sys/unix"

	"corpus/drivers"
	"corpus/internal/names"
)

var _ drivers.BlockVolumeDriver = (*Driver)(nil)

// guestPathRE is what a volume's path inside the guest may hold: it
// travels on the kernel command line, so no spaces, quotes or colons.
var guestPathRE = regexp.MustCompile(`^/[A-Za-z0-9._/-]*$`)

// validateVolumes checks the guest's block volumes.
func validateVolumes(vols []drivers.BlockVolume) error {
	if len(vols) > 20 {
		return fmt.Errorf("%d volumes: a VM takes at most 20", len(vols))
	}
	seen := map[string]bool{}
	for _, v := range vols {
		if err := names.Validate("volume", v.Name); err != nil {
			return err
		}
		if seen[volumeSerial(v.Name)] {
			return fmt.Errorf("volume %s is given twice", v.Name)
		}
		seen[volumeSerial(v.Name)] = true
		if !filepath.IsAbs(v.Device) || filepath.Clean(v.Device) != v.Device || !strings.HasPrefix(v.Device, "/dev/") {
			return fmt.Errorf("volume %s: device %q is not a block device under /dev", v.Name, v.Device)
		}
		if !guestPathRE.MatchString(v.Path) || filepath.Clean(v.Path) != v.Path || v.Path == "/" || len(v.Path) > 255 {
			return fmt.Errorf("volume %s: path %q must be a clean absolute path of letters, digits and . _ - /, not /", v.Name, v.Path)
		}
	}
	return nil
}

// vmVolumes describes guest name's volumes as domain disks, each backed
// by the guest's device node of the volume.
func (d *Driver) vmVolumes(name string, vols []drivers.BlockVolume) []vmVolume {
	out := make([]vmVolume, len(vols))
	for i, v := range vols {
		serial := volumeSerial(v.Name)
		out[i] = vmVolume{
			Meta:   volumeMeta{Name: v.Name, Serial: serial, Target: volumeTarget(i), Path: v.Path},
			Device: d.volumeNode(name, serial),
		}
	}
	return out
}

// volumeNode is the block device node QEMU opens for a guest's volume.
// The driver makes it in the guest's folder with the numbers of the
// volume's device, so the domain's definition stays the same when the
// host numbers its loop devices anew (after a reboot): the node is made
// again before the guest starts (AttachVolume). It goes with the guest's
// folder when the guest is destroyed; the volume stays.
func (d *Driver) volumeNode(name, serial string) string {
	return filepath.Join(d.guestDir(name), "volumes", serial)
}

// makeNode makes path a block device node of device's numbers, unless it
// is one already. It returns whether it changed anything.
func makeNode(path, device string) (bool, error) {
	var dev unix.Stat_t
	if err := unix.Stat(device, &dev); err != nil {
		return false, fmt.Errorf("volume device %s: %w", device, err)
	}
	if dev.Mode&unix.S_IFMT != unix.S_IFBLK {
		return false, fmt.Errorf("volume device %s is not a block device", device)
	}
	var cur unix.Stat_t
	if unix.Lstat(path, &cur) == nil && cur.Mode&unix.S_IFMT == unix.S_IFBLK && cur.Rdev == dev.Rdev {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	tmp := path + ".new"
	os.Remove(tmp)
	if err := unix.Mknod(tmp, unix.S_IFBLK|0o600, int(dev.Rdev)); err != nil {
		return false, fmt.Errorf("making device node %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("making device node %s: %w", path, err)
	}
	return true, nil
}

// makeNodes makes the device nodes of guest name's volumes.
func (d *Driver) makeNodes(name string, vols []drivers.BlockVolume) error {
	for _, v := range vols {
		if _, err := makeNode(d.volumeNode(name, volumeSerial(v.Name)), v.Device); err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
	}
	return nil
}

// domainDisks is the part of a domain's XML AttachVolume reads.
type domainDisks struct {
	Devices struct {
		Disks []diskXML `xml:"disk"`
	} `xml:"devices"`
}

// disks returns the disks of dom's definition (inactive) or, with live,
// of the running domain.
func disks(l *golibvirt.Libvirt, dom golibvirt.Domain, live bool) ([]diskXML, error) {
	var flags golibvirt.DomainXMLFlags
	if !live {
		flags = golibvirt.DomainXMLInactive
	}
	x, err := l.DomainGetXMLDesc(dom, flags)
	if err != nil {
		return nil, fmt.Errorf("reading domain %s: %w", dom.Name, err)
	}
	var d domainDisks
	if err := xml.Unmarshal([]byte(x), &d); err != nil {
		return nil, fmt.Errorf("decoding domain %s: %w", dom.Name, err)
	}
	return d.Devices.Disks, nil
}

// volumeDisk finds the guest's disk of volume meta among ds.
func volumeDisk(ds []diskXML, meta volumeMeta) (diskXML, bool) {
	for _, d := range ds {
		if d.Serial == meta.Serial || d.Target.Dev == meta.Target {
			return d, true
		}
	}
	return diskXML{}, false
}

// volumeOf returns the guest's volume of that name as recorded when
// the guest was created.
func volumeOf(meta guestMeta, name string) (volumeMeta, bool) {
	for _, v := range meta.Volumes {
		if v.Name == name {
			return v, true
		}
	}
	return volumeMeta{}, false
}

// AttachVolume makes the guest's volume node point at vol.Device and the
// guest's definition carry the volume's virtio disk; see
// drivers.BlockVolumeDriver. Both are checked first, so attaching what
// is there changes nothing. A running guest keeps the device it started
// with; one that lacks the disk (removed by hand) gets it plugged in and
// mounts it at its next boot. A volume the guest was not created with is
// drivers.ErrNotSupported: its kernel command line does not name it.
func (d *Driver) AttachVolume(ctx context.Context, name string, vol drivers.BlockVolume) error {
	if err := validateVolumes([]drivers.BlockVolume{vol}); err != nil {
		return fmt.Errorf("attaching volume to guest %s: %w", name, err)
	}
	l, err := d.client()
	if err != nil {
		return fmt.Errorf("attaching volume to guest %s: %w", name, err)
	}
	dom, meta, err := d.lookup(l, name)
	if err != nil {
		return fmt.Errorf("attaching volume to guest %s: %w", name, err)
	}
	vm, ok := volumeOf(meta, vol.Name)
	if !ok || vm.Path != vol.Path {
		return fmt.Errorf("attaching volume %s at %s to guest %s: the guest was created without it; recreate the guest: %w", vol.Name, vol.Path, name, drivers.ErrNotSupported)
	}
	state, _, err := l.DomainGetState(dom, 0)
	if err != nil {
		return fmt.Errorf("attaching volume %s to guest %s: %w", vol.Name, name, err)
	}
	running := golibvirt.DomainState(state) == golibvirt.DomainRunning
	node := d.volumeNode(name, vm.Serial)
	if !running {
		changed, err := makeNode(node, vol.Device)
		if err != nil {
			return fmt.Errorf("attaching volume %s to guest %s: %w", vol.Name, name, err)
		}
		if changed {
			d.log.Info("volume device node made", "guest", name, "volume", vol.Name, "device", vol.Device)
		}
	}
	want := vmVolume{Meta: vm, Device: node}.disk()
	wantXML, err := xml.Marshal(want)
	if err != nil {
		return fmt.Errorf("attaching volume %s to guest %s: %w", vol.Name, name, err)
	}
	defined, err := disks(l, dom, false)
	if err != nil {
		return fmt.Errorf("attaching volume %s to guest %s: %w", vol.Name, name, err)
	}
	switch have, ok := volumeDisk(defined, vm); {
	case ok && have.Type == want.Type && have.Source.Dev == want.Source.Dev && have.Serial == want.Serial:
	case ok:
		if err := l.DomainUpdateDeviceFlags(dom, string(wantXML), golibvirt.DomainDeviceModifyConfig); err != nil {
			return fmt.Errorf("attaching volume %s to guest %s: %w", vol.Name, name, err)
		}
		d.log.Info("volume disk redefined", "guest", name, "volume", vol.Name, "target", vm.Target)
	default:
		if err := l.DomainAttachDeviceFlags(dom, string(wantXML), uint32(golibvirt.DomainAffectConfig)); err != nil {
			return fmt.Errorf("attaching volume %s to guest %s: %w", vol.Name, name, err)
		}
		d.log.Info("volume disk defined again", "guest", name, "volume", vol.Name, "target", vm.Target)
	}
	if !running {
		return nil
	}
	live, err := disks(l, dom, true)
	if err != nil {
		return fmt.Errorf("attaching volume %s to guest %s: %w", vol.Name, name, err)
	}
	if _, ok := volumeDisk(live, vm); ok {
		return nil // in use with the device it started with
	}
	if _, err := makeNode(node, vol.Device); err != nil {
		return fmt.Errorf("attaching volume %s to guest %s: %w", vol.Name, name, err)
	}
	if err := l.DomainAttachDeviceFlags(dom, string(wantXML), uint32(golibvirt.DomainAffectLive)); err != nil {
		return fmt.Errorf("plugging volume %s into guest %s: %w", vol.Name, name, err)
	}
	d.log.Info("volume disk plugged in", "guest", name, "volume", vol.Name, "device", vol.Device)
	return nil
}

// growScript runs in the guest: it waits until the kernel sees the disk
// ($1) at its new size ($2 bytes; virtio announces a resize
// asynchronously), grows the mounted file system online and prints its
// size in bytes. Values come as arguments, never spliced into it.
const growScript = `dev="$1"; want="$2"
i=0
while [ "$(blockdev --getsize64 "$dev")" -lt "$want" ]; do
  i=$((i+1))
  if [ "$i" -gt 200 ]; then echo "the disk still shows $(blockdev --getsize64 "$dev") bytes, want $want" >&2; exit 1; fi
  sleep 0.05
done
resize2fs "$dev" >&2 || exit 1
dumpe2fs -h "$dev" 2>/dev/null | awk -F: '/^Block count/ {c=$2} /^Block size/ {s=$2} END {printf "%d\n", c*s}'
`

// GrowVolume tells QEMU that vol's device has size bytes now (a block
// resize) and has the guest grow the volume's file system online through
// the guest agent; see drivers.BlockVolumeDriver. It returns the file
// system's size as the guest reports it.
func (d *Driver) GrowVolume(ctx context.Context, name string, vol drivers.BlockVolume, size int64) (int64, error) {
	l, err := d.client()
	if err != nil {
		return 0, fmt.Errorf("growing volume %s of guest %s: %w", vol.Name, name, err)
	}
	dom, meta, err := d.lookup(l, name)
	if err != nil {
		return 0, fmt.Errorf("growing volume %s of guest %s: %w", vol.Name, name, err)
	}
	vm, ok := volumeOf(meta, vol.Name)
	if !ok {
		return 0, fmt.Errorf("growing volume %s of guest %s: the guest has no such volume: %w", vol.Name, name, drivers.ErrNotSupported)
	}
	state, _, err := l.DomainGetState(dom, 0)
	if err != nil {
		return 0, fmt.Errorf("growing volume %s of guest %s: %w", vol.Name, name, err)
	}
	if golibvirt.DomainState(state) != golibvirt.DomainRunning {
		return 0, fmt.Errorf("growing volume %s of guest %s: %w", vol.Name, name, drivers.ErrNotRunning)
	}
	_, capacity, _, err := l.DomainGetBlockInfo(dom, vm.Target, 0)
	if err != nil {
		return 0, fmt.Errorf("growing volume %s of guest %s: reading its disk: %w", vol.Name, name, err)
	}
	if int64(capacity) < size {
		if err := l.DomainBlockResize(dom, vm.Target, uint64(size), golibvirt.DomainBlockResizeBytes); err != nil {
			return 0, fmt.Errorf("growing volume %s of guest %s: resizing its disk: %w", vol.Name, name, err)
		}
		d.log.Info("volume disk resized", "guest", name, "volume", vol.Name, "from", capacity, "to", size)
	}
	var out, errOut strings.Builder
	code, err := d.Exec(ctx, name, drivers.ExecRequest{
		Argv:   []string{"/bin/sh", "-c", growScript, "corpus-grow", "/dev/disk/by-id/virtio-" + vm.Serial, strconv.FormatInt(size, 10)},
		Stdout: &out, Stderr: &errOut,
	})
	switch {
	case err != nil && agentDown(err):
		return 0, fmt.Errorf("growing volume %s of guest %s: %w: %w", vol.Name, name, drivers.ErrNotReady, err)
	case err != nil:
		return 0, fmt.Errorf("growing volume %s of guest %s: %w", vol.Name, name, err)
	case code != 0:
		return 0, fmt.Errorf("growing volume %s of guest %s: resize2fs in the guest: exit %d: %s", vol.Name, name, code, lastLines(errOut.String()))
	}
	fs, err := strconv.ParseInt(strings.TrimSpace(out.String()), 10, 64)
	if err != nil || fs <= 0 {
		return 0, fmt.Errorf("growing volume %s of guest %s: the guest reports file system size %q", vol.Name, name, out.String())
	}
	d.log.Info("volume grown in the guest", "guest", name, "volume", vol.Name, "filesystem_bytes", fs)
	return fs, nil
}

// agentDown reports whether err says the guest agent is not there to
// answer (not started yet, or not connected).
func agentDown(err error) bool {
	switch libvirtCode(err) {
	case golibvirt.ErrAgentUnresponsive, golibvirt.ErrAgentUnsynced:
		return true
	}
	return false
}

// lastLines returns the end of s, for error messages.
func lastLines(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 400 {
		s = "..." + s[len(s)-400:]
	}
	return s
}

// usageTimeout bounds the guest agent's answer about file systems
// (seconds): the agent asks on every pass and must not wait long on a
// guest whose agent hangs.
const usageTimeout = 3

// guestFS is one file system in the guest agent's guest-get-fsinfo.
type guestFS struct {
	Mountpoint string `json:"mountpoint"`
	Type       string `json:"type"`
	UsedBytes  *int64 `json:"used-bytes"`
	TotalBytes *int64 `json:"total-bytes"`
	Disk       []struct {
		Serial string `json:"serial"`
	} `json:"disk"`
}

// VolumeUsage asks the guest agent for the guest's file systems and
// returns the one on vol's disk (by serial, else by mount point); see
// drivers.BlockVolumeDriver.
func (d *Driver) VolumeUsage(ctx context.Context, name string, vol drivers.BlockVolume) (drivers.VolumeUsage, error) {
	l, err := d.client()
	if err != nil {
		return drivers.VolumeUsage{}, fmt.Errorf("reading volume %s of guest %s: %w", vol.Name, name, err)
	}
	dom, meta, err := d.lookup(l, name)
	if err != nil {
		return drivers.VolumeUsage{}, fmt.Errorf("reading volume %s of guest %s: %w", vol.Name, name, err)
	}
	vm, ok := volumeOf(meta, vol.Name)
	if !ok {
		return drivers.VolumeUsage{}, fmt.Errorf("reading volume %s of guest %s: the guest has no such volume: %w", vol.Name, name, drivers.ErrNotFound)
	}
	if state, _, err := l.DomainGetState(dom, 0); err != nil {
		return drivers.VolumeUsage{}, fmt.Errorf("reading volume %s of guest %s: %w", vol.Name, name, err)
	} else if golibvirt.DomainState(state) != golibvirt.DomainRunning {
		return drivers.VolumeUsage{}, fmt.Errorf("reading volume %s of guest %s: %w", vol.Name, name, drivers.ErrNotRunning)
	}
	var fss []guestFS
	if err := agentCall(l, dom, agentCommand{Execute: "guest-get-fsinfo"}, &fss, usageTimeout); err != nil {
		if agentDown(err) {
			err = fmt.Errorf("%w: %w", drivers.ErrNotReady, err)
		}
		return drivers.VolumeUsage{}, fmt.Errorf("reading volume %s of guest %s: %w", vol.Name, name, err)
	}
	for _, fs := range fss {
		onDisk := fs.Mountpoint == vm.Path
		for _, disk := range fs.Disk {
			onDisk = onDisk || disk.Serial == vm.Serial
		}
		if !onDisk || fs.UsedBytes == nil || fs.TotalBytes == nil {
			continue
		}
		return drivers.VolumeUsage{SizeBytes: *fs.TotalBytes, UsedBytes: *fs.UsedBytes, FreeBytes: *fs.TotalBytes - *fs.UsedBytes}, nil
	}
	return drivers.VolumeUsage{}, fmt.Errorf("reading volume %s of guest %s: the guest has not mounted it at %s: %w", vol.Name, name, vm.Path, drivers.ErrNotFound)
}
