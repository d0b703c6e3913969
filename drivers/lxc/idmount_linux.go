//go:build linux && cgo

package lxc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// An unprivileged overlay guest's root file system stacks on its image
// as its own ids see it: the image cache's root file system (owned by
// the image's ids, 0-65535) through an idmapped mount (mount_setattr
// MOUNT_ATTR_IDMAP, Linux 5.12; overlayfs takes such a mount as its
// lower layer from 5.19), read-only, at <Path>/.image-mounts/<guest>.
// One cache serves every range, and the mount costs a few milliseconds
// where a copy of the image shifted to each range costs a copy of the
// image, per range, in time and disk. The mount is made at create and
// again at any start that does not find it (after a reboot), and goes
// with the guest. It is kept out of the guest's folder, which liblxc's
// destroy (lxc-destroy by hand too) empties file by file on its device.
// The folder of mounts lets guests' roots through but not list it.
//
// Where the kernel cannot (probeIDMapped), each range gets its own copy
// of the image with its files shifted (unprivileged, copyShifted) and
// overlays stack on that, made once per range and image.

// imageMountsDir holds guests' image mounts, in the lxcpath (not a
// guest: guest names cannot start with a dot).
const imageMountsDir = ".image-mounts"

func (d *Driver) imageMount(name string) string {
	return filepath.Join(d.path, imageMountsDir, name)
}

// mountIDMapped mounts src at dst read-only, its ids 0..guestIDs-1 seen
// as m's.
func mountIDMapped(src, dst string, m idmap) error {
	ns, err := userns(m)
	if err != nil {
		return err
	}
	defer ns.Close()
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("mounting %s with ids %d:%d: open_tree: %w", src, m.UID, m.GID, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY, Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("mounting %s with ids %d:%d: mount_setattr: %w", src, m.UID, m.GID, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting %s with ids %d:%d at %s: %w", src, m.UID, m.GID, dst, err)
	}
	return nil
}

// unmountAll detaches every mount stacked on dir; a folder that is not a
// mount point, or is missing, is fine.
func unmountAll(dir string) error {
	for {
		err := unix.Unmount(dir, unix.MNT_DETACH)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		}
		return fmt.Errorf("unmounting %s: %w", dir, err)
	}
}

// mountImage makes the guest's image mount show the cache base's root
// file system with m's ids, unless it does already. The image's root
// folder belongs to the image's root, so the mount's root belongs to m's
// exactly when it is mounted with m; the folder under it belongs to the
// host's root.
func (d *Driver) mountImage(name, base string, m idmap) error {
	dst := d.imageMount(name)
	if ok, err := shifted(dst, m); err == nil && ok {
		return nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := unmountAll(dst); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Dir(dst), 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := mountIDMapped(filepath.Join(d.imgPath, base, "rootfs"), dst, m); err != nil {
		return fmt.Errorf("mounting its image: %w", err)
	}
	return nil
}

// unmountImage removes a guest's image mount, if it has one.
func (d *Driver) unmountImage(name string) error {
	dst := d.imageMount(name)
	if err := unmountAll(dst); err != nil {
		return err
	}
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing its image mount: %w", err)
	}
	return nil
}

// sweepImageMounts removes the image mounts of guests that are gone (a
// guest destroyed by hand, behind the driver's back).
func (d *Driver) sweepImageMounts() {
	entries, err := os.ReadDir(filepath.Join(d.path, imageMountsDir))
	if err != nil {
		return
	}
	for _, e := range entries {
		if _, err := d.readMetadata(e.Name()); validName(e.Name()) && errors.Is(err, os.ErrNotExist) {
			if err := d.unmountImage(e.Name()); err != nil {
				d.log.Warn("removing the image mount of a guest that is gone", "guest", e.Name(), "error", err)
			}
		}
	}
}

// probeIDMapped reports whether guests' overlays can stack on idmapped
// mounts of their image under path: Linux 5.19 or later, and an
// idmapped mount of path's file system works.
func probeIDMapped(path string, m idmap) error {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return err
	}
	release := unix.ByteSliceToString(u.Release[:])
	major, rest, _ := strings.Cut(release, ".")
	minor, _, _ := strings.Cut(rest, ".")
	maj, err1 := strconv.Atoi(major)
	mnr, err2 := strconv.Atoi(strings.TrimRightFunc(minor, func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil || maj < 5 || maj == 5 && mnr < 19 {
		return fmt.Errorf("kernel %s: overlayfs stacks on idmapped mounts from Linux 5.19", release)
	}
	dst, err := os.MkdirTemp(path, ".idmap-probe-")
	if err != nil {
		return err
	}
	defer os.Remove(dst)
	if err := mountIDMapped(path, dst, m); err != nil {
		return err
	}
	return unmountAll(dst)
}
