//go:build linux

package libvirt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"corpus/drivers"
	"corpus/internal/atomicfile"
)

// imageSpec says how to build one VM image.
type imageSpec struct {
	name   string // corpus image name, "debian/bookworm"
	dir    string // folder in the image dir, "debian-bookworm"
	suite  string // Debian suite given to debootstrap
	mirror string
}

// imageRecipe numbers the way images are built. Changing what goes into
// an image means raising it: a new recipe builds into a new folder, so
// the base disks under existing guests' overlays are never replaced.
const imageRecipe = 4

// folder is the image's folder in the image dir.
func (img imageSpec) folder() string { return fmt.Sprintf("%s-r%d", img.dir, imageRecipe) }

// images are the images the driver builds. Their names are the LXC
// driver's, so a guest moves between drivers without a new image name.
var images = map[string]imageSpec{
	"debian/bookworm": {name: "debian/bookworm", dir: "debian-bookworm", suite: "bookworm", mirror: "http://deb.debian.org/debian"},
}

// imagePackages are installed beside debootstrap's minimal base: a
// kernel (its initramfs has the virtio drivers), an init, udev (which
// starts the guest agent when its port appears), the QEMU guest agent
// (Exec), iproute2 (corpus-net), e2fsprogs (corpus-volumes grows a
// volume's file system) and busybox (small tools such as httpd).
var imagePackages = []string{"linux-image-amd64", "systemd-sysv", "udev", "qemu-guest-agent", "iproute2", "e2fsprogs", "busybox"}

// imageDiskSize is the virtual size of an image's root file system; its
// file is sparse and every guest's overlay only stores what it writes.
const imageDiskSize = "4G"

func imageNames() []string { return slices.Sorted(maps.Keys(images)) }

// imageFiles are the files of a built image.
type imageFiles struct {
	disk, kernel, initrd string
}

// imageMarker is written last into a built image's folder; a folder
// without it is the leftover of an interrupted build.
type imageMarker struct {
	Image string    `json:"image"`
	Built time.Time `json:"built"`
}

const markerFile = "image.json"

func (d *Driver) imageFiles(img imageSpec) imageFiles {
	dir := filepath.Join(d.imageDir, img.folder())
	return imageFiles{
		disk:   filepath.Join(dir, "disk.raw"),
		kernel: filepath.Join(dir, "vmlinuz"),
		initrd: filepath.Join(dir, "initrd.img"),
	}
}

// EnsureImage builds the named image into the driver's image dir unless
// it is there already, reporting progress; Create does the same when it
// needs the image. Building needs the Debian mirror, so run it where the
// network reaches one: an agent confined to a namespace without a route
// out (as in the end-to-end tests) uses an image built beforehand.
func (d *Driver) EnsureImage(ctx context.Context, name string, progress drivers.ProgressFunc) error {
	img, ok := images[name]
	if !ok {
		return fmt.Errorf("image %q: %w", name, drivers.ErrUnknownImage)
	}
	_, err := d.ensureImage(ctx, img, progress)
	return err
}

// ensureImage returns img's files, building the image first when it is
// not complete. Builds of one image are serialised with a lock file, so
// driver instances (agents) sharing an image dir build it once.
func (d *Driver) ensureImage(ctx context.Context, img imageSpec, progress drivers.ProgressFunc) (imageFiles, error) {
	if progress == nil {
		progress = func(string) {}
	}
	files := d.imageFiles(img)
	marker := filepath.Join(d.imageDir, img.folder(), markerFile)
	if _, err := os.Stat(marker); err == nil {
		return files, nil
	}
	if err := os.MkdirAll(d.imageDir, 0o755); err != nil {
		return imageFiles{}, fmt.Errorf("building image %s: %w", img.name, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(d.imageDir, img.folder()+".lock"), func() {
		progress(fmt.Sprintf("waiting for image %s to be built", img.name))
	})
	if err != nil {
		return imageFiles{}, fmt.Errorf("building image %s: %w", img.name, err)
	}
	defer unlock()
	if _, err := os.Stat(marker); err == nil {
		return files, nil // built while we waited
	}
	if err := d.buildImage(ctx, img, progress); err != nil {
		return imageFiles{}, fmt.Errorf("building image %s: %w", img.name, err)
	}
	return files, nil
}

// lockFile takes an exclusive lock on path, calling waiting once if it
// has to wait for it.
func lockFile(ctx context.Context, path string, waiting func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for i := 0; ; i++ {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if i == 0 {
			waiting()
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// buildImage makes img from scratch: debootstrap into a folder, the
// corpus-net unit and an fstab added, kernel and initramfs copied out,
// and the tree packed into a sparse ext4 disk image (mkfs.ext4 -d, no
// loop device or mount needed). The result replaces the image's folder
// only when complete.
func (d *Driver) buildImage(ctx context.Context, img imageSpec, progress drivers.ProgressFunc) error {
	start := time.Now()
	d.log.Info("building image", "image", img.name)
	progress(fmt.Sprintf("building image %s", img.name))
	work := filepath.Join(d.imageDir, "."+img.folder()+".build")
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	defer os.RemoveAll(work)
	rootfs := filepath.Join(work, "rootfs")
	out := filepath.Join(work, "image")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	pkgCache := filepath.Join(d.imageDir, ".debootstrap-cache")
	if err := os.MkdirAll(pkgCache, 0o755); err != nil {
		return err
	}

	// Two stages, so the initramfs settings are in place before the
	// kernel's packages are configured: the initramfs then holds only
	// what a VM needs, which builds and (under TCG) boots much faster.
	progress(fmt.Sprintf("debootstrap %s: fetching and unpacking (minutes on a cold cache)", img.suite))
	if err := runLogged(ctx, progress, "debootstrap",
		"debootstrap", "--foreign", "--variant=minbase", "--cache-dir="+pkgCache,
		"--include="+strings.Join(imagePackages, ","), img.suite, rootfs, img.mirror); err != nil {
		return err
	}
	if err := writeFiles(rootfs, initramfsFiles); err != nil {
		return err
	}
	progress(fmt.Sprintf("debootstrap %s: configuring", img.suite))
	if err := runLogged(ctx, progress, "debootstrap second stage",
		"chroot", rootfs, "/debootstrap/debootstrap", "--second-stage"); err != nil {
		return err
	}
	progress("configuring the guest system")
	if err := prepareRootfs(rootfs); err != nil {
		return err
	}
	files := imageFiles{disk: filepath.Join(out, "disk.raw"), kernel: filepath.Join(out, "vmlinuz"), initrd: filepath.Join(out, "initrd.img")}
	for _, f := range []struct{ glob, to string }{
		{"boot/vmlinuz-*", files.kernel},
		{"boot/initrd.img-*", files.initrd},
	} {
		m, _ := filepath.Glob(filepath.Join(rootfs, f.glob))
		if len(m) != 1 {
			return fmt.Errorf("image has %d files %s, want 1", len(m), f.glob)
		}
		b, err := os.ReadFile(m[0])
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.to, b, 0o644); err != nil {
			return err
		}
	}
	progress("writing the ext4 root disk")
	if err := runLogged(ctx, progress, "mkfs.ext4", "mkfs.ext4", "-q", "-F", "-L", "corpus-root",
		"-E", "lazy_itable_init=1,lazy_journal_init=1", "-d", rootfs, files.disk, imageDiskSize); err != nil {
		return err
	}
	m, err := json.Marshal(imageMarker{Image: img.name, Built: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(out, markerFile), m, 0o644); err != nil {
		return err
	}
	final := filepath.Join(d.imageDir, img.folder())
	if err := os.RemoveAll(final); err != nil {
		return err
	}
	if err := os.Rename(out, final); err != nil {
		return err
	}
	took := time.Since(start).Round(time.Second)
	progress(fmt.Sprintf("built image %s in %s", img.name, took))
	d.log.Info("built image", "image", img.name, "duration", took)
	return nil
}

// runLogged runs argv, reporting every 30 s that it still runs; its
// output is returned in the error when it fails.
func runLogged(ctx context.Context, progress drivers.ProgressFunc, what string, argv ...string) error {
	start := time.Now()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var buf tailBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("running %s: %w", what, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("running %s: %w: %s", what, err, buf.String())
			}
			return nil
		case <-tick.C:
			progress(fmt.Sprintf("still running %s (%s)", what, time.Since(start).Round(time.Second)))
		}
	}
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return strings.TrimSpace(string(t.b)) }

// corpusNet applies the static network the driver puts on the guest
// kernel's command line. It is part of the image, the same for every
// guest; the values come from /proc/cmdline at boot.
const corpusNet = `#!/bin/sh
# corpus-net: configure the network corpus gave on the kernel command line.
# Shell builtins and one ip -batch: every process costs under emulation.
read -r cmdline < /proc/cmdline
for arg in $cmdline; do
  case "$arg" in
    corpus.ip=*) ip="${arg#corpus.ip=}" ;;
    corpus.gw=*) gw="${arg#corpus.gw=}" ;;
    corpus.mac=*) mac="${arg#corpus.mac=}" ;;
    corpus.dns=*) dns="${arg#corpus.dns=}" ;;
    corpus.search=*) search="${arg#corpus.search=}" ;;
  esac
done
[ -n "$ip" ] || exec ip link set lo up
dev=
i=0
while [ $i -lt 1200 ]; do
  for d in /sys/class/net/*; do
    read -r a < "$d/address" && [ "$a" = "$mac" ] && dev="${d##*/}"
  done
  [ -n "$dev" ] && break
  sleep 0.1
  i=$((i + 1))
done
if [ -z "$dev" ]; then
  echo "corpus-net: no interface with address $mac" >&2
  exit 1
fi
if [ -n "$dns" ]; then
  {
    [ -z "$search" ] || echo "search $(echo "$search" | tr , ' ')"
    for s in $(echo "$dns" | tr , ' '); do echo "nameserver $s"; done
  } > /etc/resolv.conf
fi
{
  echo "link set lo up"
  echo "link set $dev up"
  echo "addr replace $ip dev $dev"
  [ -z "$gw" ] || echo "route replace default via $gw dev $dev"
} | ip -batch -
`

// corpusNetUnit runs corpus-net as early as udev runs: the root file
// system is mounted read-write by the kernel (rw on its command line), so
// nothing else need come first.
const corpusNetUnit = `[Unit]
Description=corpus static network from the kernel command line
DefaultDependencies=no
After=systemd-udevd.service
Before=network.target
Wants=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/corpus-net

[Install]
WantedBy=multi-user.target
`

// corpusVolumes mounts the volumes the driver names on the kernel command
// line, corpus.vol=SERIAL:PATH, one argument per volume: the virtio disk
// of that serial at PATH. It grows each file system to its disk, so a
// volume enlarged while the VM was off is whole at once. The file
// system is made by the host before the disk is first given to a VM;
// nothing here formats a disk.
const corpusVolumes = `#!/bin/sh
# corpus-volumes: mount the volumes corpus gave on the kernel command line.
rc=0
read -r cmdline < /proc/cmdline
for arg in $cmdline; do
  case "$arg" in
    corpus.vol=*:/*) v="${arg#corpus.vol=}" ;;
    *) continue ;;
  esac
  serial="${v%%:*}"
  path="${v#*:}"
  dev=
  i=0
  while [ $i -lt 600 ]; do
    if [ -b "/dev/disk/by-id/virtio-$serial" ]; then
      dev="/dev/disk/by-id/virtio-$serial"
      break
    fi
    for d in /sys/block/vd*; do
      read -r s < "$d/serial" 2>/dev/null && [ "$s" = "$serial" ] && dev="/dev/${d##*/}"
    done
    [ -n "$dev" ] && break
    sleep 0.1
    i=$((i + 1))
  done
  if [ -z "$dev" ]; then
    echo "corpus-volumes: no disk with serial $serial for $path" >&2
    rc=1
    continue
  fi
  mkdir -p "$path"
  if ! mountpoint -q "$path"; then
    if ! mount -t ext4 -o noatime,nodev,nosuid "$dev" "$path"; then
      echo "corpus-volumes: cannot mount $dev at $path" >&2
      rc=1
      continue
    fi
  fi
  resize2fs "$dev" >/dev/null 2>&1 || echo "corpus-volumes: cannot grow the file system at $path" >&2
done
exit $rc
`

const corpusVolumesUnit = `[Unit]
Description=corpus volumes from the kernel command line
After=systemd-udevd.service local-fs.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/corpus-volumes

[Install]
WantedBy=multi-user.target
`

// imageFile is a file written into an image's tree.
type imageFile struct {
	path string
	data string
	mode os.FileMode
}

// initramfsFiles make the kernel's initramfs small: only the modules a
// VM needs to mount its root disk (the hook is not a conffile, so
// packages never ask about it).
var initramfsFiles = []imageFile{
	{"etc/initramfs-tools/conf.d/corpus.conf", "MODULES=list\nCOMPRESS=gzip\n", 0o644},
	{"etc/initramfs-tools/hooks/corpus-virtio", `#!/bin/sh
case "$1" in prereqs) exit 0 ;; esac
. /usr/share/initramfs-tools/hook-functions
for m in virtio_pci virtio_blk virtio_net virtio_console virtio_rng ext4 crc32c_generic; do
  manual_add_modules "$m"
done
`, 0o755},
}

// vmFiles make a debootstrapped tree boot as a corpus VM. Changing them
// needs a new imageRecipe.
var vmFiles = []imageFile{
	{"etc/fstab", "/dev/vda / ext4 rw,errors=remount-ro 0 1\n", 0o644},
	{"etc/hostname", "localhost\n", 0o644},
	{"usr/local/sbin/corpus-net", corpusNet, 0o755},
	{"etc/systemd/system/corpus-net.service", corpusNetUnit, 0o644},
	{"usr/local/sbin/corpus-volumes", corpusVolumes, 0o755},
	{"etc/systemd/system/corpus-volumes.service", corpusVolumesUnit, 0o644},
	// Exec works only once the guest has its address and its volume:
	// deploys that run right away find the network up and the data there.
	{"etc/systemd/system/qemu-guest-agent.service.d/corpus.conf", "[Unit]\nAfter=corpus-net.service corpus-volumes.service\n", 0o644},
	// Every VM gets its own machine id on first boot.
	{"etc/machine-id", "", 0o444},
}

// vmMasked are units of a Debian system a corpus VM has no use for,
// masked so that a boot (slow under emulation: every unit is processes
// and file system work) does not run them: e2scrub checks LVM snapshots
// (a VM has no LVM), there is no local login to record (utmp) and no
// keyboard or screen (the static gettys; the serial console keeps its
// own), no persistent store for kernel crash dumps (pstore) and no use
// for the modules the kernel loads on demand anyway.
var vmMasked = []string{
	"e2scrub_reap.service", "e2scrub_all.timer",
	"systemd-update-utmp.service", "systemd-update-utmp-runlevel.service",
	"getty-static.service", "getty@tty1.service",
	"kmod-static-nodes.service", "systemd-pstore.service",
	"modprobe@configfs.service", "modprobe@dm_mod.service", "modprobe@drm.service",
	"modprobe@efi_pstore.service", "modprobe@fuse.service", "modprobe@loop.service",
	"sys-kernel-debug.mount", "sys-kernel-tracing.mount",
}

// writeFiles writes files into the tree at rootfs.
func writeFiles(rootfs string, files []imageFile) error {
	for _, f := range files {
		p := filepath.Join(rootfs, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := atomicfile.Write(p, []byte(f.data), f.mode); err != nil {
			return fmt.Errorf("preparing image: %w", err)
		}
	}
	return nil
}

// prepareRootfs makes a debootstrapped tree boot as a corpus VM.
func prepareRootfs(rootfs string) error {
	if err := writeFiles(rootfs, vmFiles); err != nil {
		return err
	}
	wants := filepath.Join(rootfs, "etc/systemd/system/multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		return err
	}
	for _, unit := range []string{"corpus-net.service", "corpus-volumes.service"} {
		link := filepath.Join(wants, unit)
		os.Remove(link)
		if err := os.Symlink("/etc/systemd/system/"+unit, link); err != nil {
			return fmt.Errorf("preparing image: %w", err)
		}
	}
	for _, unit := range vmMasked {
		link := filepath.Join(rootfs, "etc/systemd/system", unit)
		os.Remove(link)
		if err := os.Symlink("/dev/null", link); err != nil {
			return fmt.Errorf("preparing image: %w", err)
		}
	}
	// The image's /etc and /var are as new as its /usr: the units that
	// run once after a package upgrade (ConditionNeedsUpdate: sysusers,
	// ldconfig, the hwdb and catalog updates) have nothing to do at the
	// first boot.
	for _, f := range []string{"etc/.updated", "var/.updated"} {
		if err := atomicfile.Write(filepath.Join(rootfs, f), nil, 0o644); err != nil {
			return fmt.Errorf("preparing image: %w", err)
		}
	}
	// Package downloads are not part of the image.
	debs, _ := filepath.Glob(filepath.Join(rootfs, "var/cache/apt/archives/*.deb"))
	for _, f := range debs {
		os.Remove(f)
	}
	return nil
}

// WriteTestImage writes, under imageDir, a stand-in for image name made
// of empty kernel and initrd files and a 1 MiB raw disk, marked complete.
// It is for libvirt's test hypervisor (test:///default), which boots
// nothing; a real hypervisor given it fails to boot.
func WriteTestImage(imageDir, name string) error {
	img, ok := images[name]
	if !ok {
		return fmt.Errorf("image %q: %w", name, drivers.ErrUnknownImage)
	}
	dir := filepath.Join(imageDir, img.folder())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for f, size := range map[string]int64{"vmlinuz": 0, "initrd.img": 0, "disk.raw": 1 << 20} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			return err
		}
		if err := os.Truncate(filepath.Join(dir, f), size); err != nil {
			return err
		}
	}
	m, err := json.Marshal(imageMarker{Image: name, Built: time.Now().UTC()})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, markerFile), m, 0o644)
}
