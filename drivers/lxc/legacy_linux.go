//go:build linux && cgo

package lxc

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	golxc "github.com/lxc/go-lxc"

	"corpus/drivers"
	"corpus/internal/atomicfile"
)

var _ drivers.IDRemapper = (*Driver)(nil)

// RemapIDs moves the stopped guest name to id range r (see
// drivers.IDRemapper): a guest on the range every guest shared before
// ranges of their own (an older corpus made it), one made privileged by
// an older corpus, or one whose range the coordinator changed. Its
// changes over the image and its folders are shifted to the range's
// ids, its overlay stacks on the image as the range sees it, and its
// configuration maps the range; its volumes are shifted at its start
// (shiftMounts). The metadata is written last, so an interrupted move
// runs again (every step can).
func (d *Driver) RemapIDs(ctx context.Context, name string, r uint32) error {
	if err := d.remapIDs(ctx, name, r); err != nil {
		return fmt.Errorf("moving container %s to id range %d: %w", name, r, err)
	}
	return nil
}

func (d *Driver) remapIDs(ctx context.Context, name string, r uint32) error {
	c, m, err := d.openGuest(name)
	if err != nil {
		return err
	}
	defer c.Release()
	if m.Privileged {
		return nil
	}
	if d.ids == nil {
		return fmt.Errorf("no id map on this host: %v", d.idsErr)
	}
	want, err := d.ids.idmap(r)
	if err != nil {
		return err
	}
	if m.IDMap != nil && *m.IDMap == want {
		return nil
	}
	if c.Running() {
		return fmt.Errorf("its ids move at its next start: %w", drivers.ErrRunning)
	}
	if m.IDMap == nil {
		_, err = d.confineLegacy(ctx, c, m, r)
	} else {
		_, err = d.moveIDs(ctx, c, m, want, false)
	}
	return err
}

// confineLegacy turns a stopped guest an older corpus made privileged
// (metadata with neither IDMap nor Privileged) into an unprivileged one
// in id range r, as new guests are: its files move to the range as in
// moveIDs, its configuration gets the confinement of security_linux.go,
// and its host folders are listed for shiftMounts. Such a guest keeps
// the host's file system as its disk limit.
func (d *Driver) confineLegacy(ctx context.Context, c *golxc.Container, m metadata, r uint32) (metadata, error) {
	if d.ids == nil {
		return m, fmt.Errorf("no id map on this host: %v", d.idsErr)
	}
	want, err := d.ids.idmap(r)
	if err != nil {
		return m, err
	}
	// Its volume binds, as configure wrote them.
	m.Mounts = nil
	for _, e := range c.ConfigItem("lxc.mount.entry") {
		if f := strings.Fields(e); len(f) == 6 && f[3] == "bind,create=dir" && filepath.IsAbs(f[0]) {
			m.Mounts = append(m.Mounts, f[0])
		}
	}
	m, err = d.moveIDs(ctx, c, m, want, true)
	if err == nil {
		d.log.Warn("confined a guest an older corpus made privileged", "guest", m.Name)
	}
	return m, err
}

// moveIDs shifts a stopped guest's files to the map want and maps its
// user namespace there; confine writes its whole confinement too.
func (d *Driver) moveIDs(ctx context.Context, c *golxc.Container, m metadata, want idmap, confine bool) (metadata, error) {
	dir := d.guestDir(m.Name)
	if lower, upper, ok := overlayPaths(c); ok {
		// The upper folder may live on its disk, whose root is the
		// guest's too.
		if err := d.mountDisk(ctx, m.Name, &want); err != nil {
			return m, err
		}
		// The upper folder and overlayfs's work folder beside it.
		if err := d.ids.shift(filepath.Dir(upper), want); err != nil {
			return m, err
		}
		if m.Base == "" {
			base, err := d.baseOf(lower)
			if err != nil {
				return m, err
			}
			m.Base = base
		}
		if d.idmapped {
			// Mounted at its start.
			lower = d.imageMount(m.Name)
		} else {
			img := unprivileged(imageSpec{name: m.Base, cache: m.Base}, want)
			if err := d.ensureImage(ctx, img, nil); err != nil {
				return m, err
			}
			lower, m.Base = filepath.Join(d.imgPath, img.cache, "rootfs"), ""
		}
		if err := c.SetConfigItem("lxc.rootfs.path", "overlay:"+lower+":"+upper); err != nil {
			return m, err
		}
	} else if err := d.ids.shift(filepath.Join(dir, "rootfs"), want); err != nil {
		return m, err
	}
	if err := os.Lchown(dir, int(want.UID), int(want.GID)); err != nil {
		return m, err
	}
	w := &configWriter{c: c}
	if confine {
		mem, cpu := configuredLimits(c)
		d.configureSecurity(w, &want)
		d.configureLimits(w, mem, cpu)
	} else {
		setIDMap(w, &want)
	}
	if w.err != nil {
		return m, w.err
	}
	if err := c.SaveConfigFile(c.ConfigFileName()); err != nil {
		return m, fmt.Errorf("saving config: %w", err)
	}
	from := "the host's"
	if m.IDMap != nil {
		from = fmt.Sprintf("%d:%d", m.IDMap.UID, m.IDMap.GID)
	}
	m.IDMap = &want
	b, err := json.Marshal(m)
	if err != nil {
		return m, err
	}
	if err := atomicfile.Write(filepath.Join(dir, metadataFile), b, 0o644); err != nil {
		return m, err
	}
	d.log.Info("moved a guest's ids", "guest", m.Name, "from", from, "to", fmt.Sprintf("%d:%d", want.UID, want.GID))
	return m, nil
}

// shiftedCopy matches the name of a cache's copy shifted to one range
// (unprivileged): the cache's name, then "-u<uid>-<gid>".
var shiftedCopy = regexp.MustCompile(`-u[0-9]+-[0-9]+$`)

// baseOf names the image cache an overlay's lower folder shows: the
// cache itself, or the one a shifted copy was made from.
func (d *Driver) baseOf(lower string) (string, error) {
	rel, err := filepath.Rel(d.imgPath, filepath.Clean(lower))
	if err != nil || filepath.Base(rel) != "rootfs" || strings.Contains(filepath.Dir(rel), "/") || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("its root file system %s is not over an image of %s", lower, d.imgPath)
	}
	return shiftedCopy.ReplaceAllString(filepath.Dir(rel), ""), nil
}
