//go:build linux && cgo

package lxc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	golxc "github.com/lxc/go-lxc"

	"corpus/internal/atomicfile"
)

// confineLegacy turns a stopped guest an older corpus made privileged
// (metadata with neither IDMap nor Privileged) into an unprivileged one,
// as new guests are: its changes over the image (the overlay's upper
// folder, or its copied root) and its host folders are shifted into the
// host's id map, its overlay stacks on the image's unprivileged copy, and
// its configuration gets the confinement of security_linux.go. The new
// metadata is written last, so an interrupted conversion runs again (every
// step can). Such a guest keeps the host's file system as its disk limit.
func (d *Driver) confineLegacy(ctx context.Context, c *golxc.Container, m metadata) (metadata, error) {
	if d.idmap == nil {
		return m, fmt.Errorf("no id map on this host: %v", d.idmapErr)
	}
	img, ok := images[m.Image]
	if !ok {
		return m, fmt.Errorf("image %q is unknown to this corpus", m.Image)
	}
	ui := unprivileged(img, *d.idmap)
	if err := d.ensureImage(ctx, ui, nil); err != nil {
		return m, err
	}
	dir := d.guestDir(m.Name)
	if _, upper, ok := overlayPaths(c); ok {
		if err := shift(upper, *d.idmap); err != nil {
			return m, err
		}
		for _, p := range []string{filepath.Dir(upper), filepath.Join(filepath.Dir(upper), "work")} {
			if err := os.Lchown(p, int(d.idmap.UID), int(d.idmap.GID)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return m, err
			}
		}
		if err := c.SetConfigItem("lxc.rootfs.path", "overlay:"+filepath.Join(d.imgPath, ui.cache, "rootfs")+":"+upper); err != nil {
			return m, err
		}
	} else if err := shift(filepath.Join(dir, "rootfs"), *d.idmap); err != nil {
		return m, err
	}
	if err := os.Lchown(dir, int(d.idmap.UID), int(d.idmap.GID)); err != nil {
		return m, err
	}

	// Its volume binds, as configure wrote them.
	for _, e := range c.ConfigItem("lxc.mount.entry") {
		if f := strings.Fields(e); len(f) == 6 && f[3] == "bind,create=dir" && filepath.IsAbs(f[0]) {
			m.Mounts = append(m.Mounts, f[0])
		}
	}
	w := &configWriter{c: c}
	mem, cpu := configuredLimits(c)
	d.configureSecurity(w, d.idmap)
	d.configureLimits(w, mem, cpu)
	if w.err != nil {
		return m, w.err
	}
	if err := c.SaveConfigFile(c.ConfigFileName()); err != nil {
		return m, fmt.Errorf("saving config: %w", err)
	}
	m.IDMap = d.idmap
	b, err := json.Marshal(m)
	if err != nil {
		return m, err
	}
	if err := atomicfile.Write(filepath.Join(dir, metadataFile), b, 0o644); err != nil {
		return m, err
	}
	d.log.Warn("confined a guest an older corpus made privileged", "guest", m.Name)
	return m, nil
}
