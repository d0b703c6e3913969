//go:build linux && cgo

package lxc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	golxc "github.com/lxc/go-lxc"

	"corpus/volume"
	"corpus/volume/loop"
)

// A guest's disk limit bounds what it writes to its root file system: the
// upper folder of its overlay (all the guest has changed or added over
// its image, releases included) lives on an ext4 file system of that
// size in a sparse image, the same loop volumes package volume/loop keeps
// for data volumes, in <Path>/.disks. A full guest gets ENOSPC; the
// host's file system never fills. The file system is mounted at
// <guest>/disk while the guest exists (again at start after a host
// reboot), and deleted with the guest.
//
// Only overlay clones have one: a copied root file system (the fallback
// where the lxcpath sits on overlayfs) would need the whole image copied
// into it, and keeps the host's file system as its limit.

// disksDir is the loop backend's folder in the lxcpath.
const disksDir = ".disks"

// diskDir is where a guest's disk is mounted.
func (d *Driver) diskDir(name string) string { return filepath.Join(d.guestDir(name), "disk") }

// makeDisk gives a new overlay guest its disk of size bytes and moves
// its overlay's upper folder onto it, owned by the guest's root (m; nil
// for a privileged guest).
func (d *Driver) makeDisk(ctx context.Context, c *golxc.Container, name string, size int64, m *idmap) error {
	if d.disks == nil || d.clone != cloneOverlay || size <= 0 {
		return nil
	}
	if err := d.disks.Create(ctx, name, size); err != nil {
		return fmt.Errorf("making its %d-byte disk: %w", size, err)
	}
	if err := d.mountDisk(ctx, name, m); err != nil {
		return err
	}
	lower, _, ok := overlayPaths(c)
	if !ok {
		return fmt.Errorf("making its disk: root file system %q is not an overlay", c.ConfigItem("lxc.rootfs.path"))
	}
	upper := filepath.Join(d.diskDir(name), "delta")
	if err := os.Mkdir(upper, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if m != nil {
		if err := os.Lchown(upper, int(m.UID), int(m.GID)); err != nil {
			return err
		}
	}
	if err := c.SetConfigItem("lxc.rootfs.path", "overlay:"+lower+":"+upper); err != nil {
		return fmt.Errorf("pointing the root file system at its disk: %w", err)
	}
	// The clone's own upper folder, empty, goes.
	return os.RemoveAll(filepath.Join(d.guestDir(name), "overlay"))
}

// mountDisk mounts a guest's disk at diskDir when it has one and it is
// not mounted yet; the file system's root goes to the guest's root, who
// makes the overlay's work folder in it.
func (d *Driver) mountDisk(ctx context.Context, name string, m *idmap) error {
	if d.disks == nil {
		return nil
	}
	if _, err := d.disks.Stat(ctx, name); errors.Is(err, volume.ErrNotFound) {
		return nil // a guest without a disk (an older corpus made it)
	} else if err != nil {
		return err
	}
	if err := d.disks.Mount(ctx, name, d.diskDir(name)); err != nil {
		return fmt.Errorf("mounting its disk: %w", err)
	}
	if m != nil {
		if err := os.Lchown(d.diskDir(name), int(m.UID), int(m.GID)); err != nil {
			return err
		}
	}
	return nil
}

// deleteDisk unmounts and deletes a guest's disk; a guest without one
// is fine.
func (d *Driver) deleteDisk(ctx context.Context, name string) error {
	if d.disks == nil {
		return nil
	}
	if err := d.disks.Delete(ctx, name, true); err != nil && !errors.Is(err, volume.ErrNotFound) {
		return fmt.Errorf("deleting its disk: %w", err)
	}
	return nil
}

// overlayPaths splits an overlay root file system's lower and upper
// folders out of the container's configuration (liblxc gives the path
// with or without its "overlay:" prefix).
func overlayPaths(c *golxc.Container) (lower, upper string, ok bool) {
	v := c.ConfigItem("lxc.rootfs.path")
	if len(v) == 0 {
		return "", "", false
	}
	// liblxc gives the value without its "overlay:" prefix; a folder's
	// is one absolute path, with or without "dir:".
	rest := strings.TrimSpace(v[0])
	for _, prefix := range []string{"overlay:", "overlayfs:"} {
		rest = strings.TrimPrefix(rest, prefix)
	}
	if strings.HasPrefix(rest, "dir:") {
		return "", "", false
	}
	lower, upper, ok = strings.Cut(rest, ":")
	return lower, upper, ok && lower != "" && upper != ""
}

// newDisks opens the loop backend of guests' disks, nil (no limits, said
// in the log) where it cannot run.
func newDisks(path string, log *slog.Logger) *loop.Backend {
	b, err := loop.New(loop.Config{Root: filepath.Join(path, disksDir), Logger: log})
	if err != nil {
		log.Warn("guests' disk limits are not enforced", "error", err)
		return nil
	}
	return b
}
