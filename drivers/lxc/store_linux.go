//go:build linux && cgo

package lxc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"corpus/internal/atomicfile"
)

// The image store (Config.Store) keeps a copy of every image built with
// packages, outside any agent's state: the debian template runs apt in a
// chroot for minutes (PostgreSQL's image: about two), a copy takes
// seconds. An image there is a container folder named as its cache
// (which names the template, release and package set) and a marker
// beside it, written last: a folder without one is a leftover of a copy
// that did not finish, ignored and replaced. Nothing there expires: to
// take newer packages, remove the store's entries (or the whole folder)
// and the agents' image caches (`corpus image rm`).

// storeMarker is the marker of an image in the store.
type storeMarker struct {
	Image  string    `json:"image"`
	Stored time.Time `json:"stored"`
}

// stores says whether img goes through the store: a template's image
// with packages. Other images build in seconds (busybox, the debian base
// from the template's own cache) or are copies of one here (shifted).
func (d *Driver) stores(img imageSpec) bool {
	return d.store != "" && img.from == "" && len(img.packages) > 0
}

// fromStore makes img's cache a copy of the store's, when the store has
// it complete; it reports whether it did.
func (d *Driver) fromStore(img imageSpec) (bool, error) {
	if !d.stores(img) {
		return false, nil
	}
	if _, err := os.Stat(filepath.Join(d.store, img.cache+".json")); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if err := copyContainer(filepath.Join(d.store, img.cache), filepath.Join(d.imgPath, img.cache), nil); err != nil {
		return false, fmt.Errorf("copying from the image store: %w", err)
	}
	d.stored.Add(1)
	d.log.Info("copied image from the image store", "image", img.name, "store", d.store)
	return true, nil
}

// toStore copies img's freshly built cache into the store, unless it has
// one already (another agent of the host stored it meanwhile). A failure
// costs the next build its shortcut, not this one its image: it is
// logged.
func (d *Driver) toStore(img imageSpec) {
	if !d.stores(img) {
		return
	}
	if err := d.store1(img); err != nil {
		d.log.Warn("keeping an image in the image store", "image", img.name, "store", d.store, "error", err)
	}
}

func (d *Driver) store1(img imageSpec) error {
	marker := filepath.Join(d.store, img.cache+".json")
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	if err := os.MkdirAll(d.store, 0o700); err != nil {
		return err
	}
	dst := filepath.Join(d.store, img.cache)
	if err := os.RemoveAll(dst); err != nil { // a copy that did not finish
		return err
	}
	if err := copyContainer(filepath.Join(d.imgPath, img.cache), dst, nil); err != nil {
		if _, serr := os.Stat(marker); serr == nil {
			return nil // another agent's copy won the rename
		}
		return err
	}
	m, err := json.Marshal(storeMarker{Image: img.name, Stored: time.Now().UTC()})
	if err != nil {
		return err
	}
	return atomicfile.Write(marker, m, 0o644)
}
