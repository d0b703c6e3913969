//go:build linux && cgo

package lxc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	golxc "github.com/lxc/go-lxc"

	"corpus/drivers"
	"corpus/images/cache"
	"corpus/images/oci"
	"corpus/internal/imageref"
)

var _ drivers.ImageCache = (*Driver)(nil)

// The image cache is every complete image under <Path>/.images (a cache
// container and its marker, see image_linux.go) and the layers of the
// OCI store (<Path>/.oci). An image is a cache container with the
// copies of it shifted per id range ("<cache>-u<uid>-<gid>"); its last
// use is its marker's modification time, touched whenever a guest is
// made from it. The guests using an image are those whose metadata
// names it (metadata.Cache). A layer goes with the last image that
// holds it.
//
// Create and EnsureImage hold cacheMu for reading from the pull to the
// guest's metadata, so nothing is removed between a cache being found
// complete and a guest being made from it; removals hold it for
// writing. After each build the cache is collected down to its cap
// (Config.ImageCacheMax): the images no guest uses go, least recently
// used first.

// variantName matches the cache of an image's copy for one id range
// (unprivileged).
var variantName = regexp.MustCompile(`^(.+)-u[0-9]+-[0-9]+$`)

// Images lists the cache's complete images.
func (d *Driver) Images(ctx context.Context) ([]drivers.CachedImage, drivers.ImageCacheUsage, error) {
	d.cacheMu.RLock()
	defer d.cacheMu.RUnlock()
	s, err := d.scanImages(ctx)
	if err != nil {
		return nil, drivers.ImageCacheUsage{}, err
	}
	out := make([]drivers.CachedImage, 0, len(s.Images))
	for _, img := range s.Images {
		out = append(out, img.CachedImage)
	}
	return out, s.Usage, nil
}

// RemoveImage removes one image no guest uses (drivers.ImageCache).
func (d *Driver) RemoveImage(ctx context.Context, name string) (drivers.CachedImage, int64, error) {
	d.cacheMu.Lock()
	defer d.cacheMu.Unlock()
	s, err := d.scanImages(ctx)
	if err != nil {
		return drivers.CachedImage{}, 0, err
	}
	img, err := s.Find(name)
	if err != nil {
		return drivers.CachedImage{}, 0, err
	}
	if len(img.Guests) > 0 {
		return img.CachedImage, 0, fmt.Errorf("image %s is used by guest(s) %s: %w; delete them first", img.Name, strings.Join(img.Guests, ", "), drivers.ErrImageInUse)
	}
	freed, err := d.removeImages(s, []*cache.Image{img})
	return img.CachedImage, freed, err
}

// PruneImages removes every image no guest uses (drivers.ImageCache).
func (d *Driver) PruneImages(ctx context.Context) ([]drivers.CachedImage, int64, error) {
	d.cacheMu.Lock()
	defer d.cacheMu.Unlock()
	s, err := d.scanImages(ctx)
	if err != nil {
		return nil, 0, err
	}
	unused := s.Unused(d.building)
	out := make([]drivers.CachedImage, 0, len(unused))
	for _, img := range unused {
		out = append(out, img.CachedImage)
	}
	freed, err := d.removeImages(s, unused)
	return out, freed, err
}

// ImageCacheUsage returns the usage last measured (drivers.ImageCache).
func (d *Driver) ImageCacheUsage() drivers.ImageCacheUsage {
	if u := d.usage.Load(); u != nil {
		return *u
	}
	return drivers.ImageCacheUsage{}
}

// collectImages removes images no guest uses, least recently used
// first, while the cache holds more than its cap; it runs after an
// image was built, and keeps the cache keep that was asked for. While
// the cache is busy (a guest being made, a listing, a removal) it does
// nothing rather than wait: the next build collects.
func (d *Driver) collectImages(ctx context.Context, keep string) {
	if !d.cacheMu.TryLock() {
		return
	}
	defer d.cacheMu.Unlock()
	s, err := d.scanImages(ctx)
	if err != nil {
		d.log.Warn("measuring the image cache", "error", err)
		return
	}
	if d.cacheMax <= 0 || s.Usage.Bytes <= d.cacheMax {
		return
	}
	victims := s.OverCap(d.cacheMax, func(img *cache.Image) bool { return img.ID == keep || d.building(img) })
	for _, img := range victims {
		d.log.Info("collecting unused image over the cache's cap", "image", img.Name, "last_used", img.LastUsed, "max_bytes", d.cacheMax)
	}
	if _, err := d.removeImages(s, victims); err != nil {
		d.log.Warn("collecting the image cache", "error", err)
	}
	if u := d.ImageCacheUsage(); u.Bytes > d.cacheMax {
		d.log.Warn("image cache stays over its cap: guests use the rest", "bytes", u.Bytes, "max_bytes", d.cacheMax)
	}
}

// building reports whether a build of img's caches runs (one whose
// caller stopped waiting runs on, without cacheMu).
func (d *Driver) building(img *cache.Image) bool {
	d.buildsMu.Lock()
	defer d.buildsMu.Unlock()
	for _, c := range img.Parts {
		if d.builds[c] != nil {
			return true
		}
	}
	return false
}

// removeImages removes imgs and then every layer no remaining image
// holds (none while a build runs: its layers are not recorded yet), and
// measures the cache anew. It returns the bytes freed.
func (d *Driver) removeImages(s *cache.Set, imgs []*cache.Image) (int64, error) {
	var freed int64
	var errs []error
	for _, img := range imgs {
		for _, c := range slices.Backward(img.Parts) {
			if err := d.removeCache(c); err != nil {
				errs = append(errs, fmt.Errorf("removing image %s: %w", img.Name, err))
			}
		}
		freed += img.Own
		d.log.Info("removed image", "image", img.Name, "digest", img.Digest)
	}
	d.buildsMu.Lock()
	quiet := len(d.builds) == 0
	d.buildsMu.Unlock()
	if quiet {
		for _, l := range s.Orphans(imgs) {
			err := os.Remove(filepath.Join(d.oci.Root, "blobs", "sha256", l))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing layer sha256:%s: %w", l, err))
				continue
			}
			freed += s.Layers[l]
		}
	}
	if _, err := d.scanImages(context.Background()); err != nil {
		errs = append(errs, err)
	}
	return freed, errors.Join(errs...)
}

// removeCache removes one cache container: its marker first (from then
// on it is incomplete), then its folder, renamed aside in one step to a
// name sweepCopies removes should this be cut short.
func (d *Driver) removeCache(c string) error {
	if err := os.Remove(filepath.Join(d.imgPath, c+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	aside := filepath.Join(d.imgPath, "."+c+".copy-removed")
	if err := os.RemoveAll(aside); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(d.imgPath, c), aside); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.RemoveAll(aside); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(d.imgPath, c+".log")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// scanImages reads the cache from the disk and records its usage.
func (d *Driver) scanImages(ctx context.Context) (*cache.Set, error) {
	s := &cache.Set{Layers: map[string]int64{}}
	entries, err := os.ReadDir(d.imgPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the image cache: %w", err)
	}
	complete := map[string]bool{}
	for _, e := range entries {
		if c, ok := strings.CutSuffix(e.Name(), ".json"); ok && !strings.HasPrefix(c, ".") && !e.IsDir() {
			complete[c] = true
		}
	}
	byCache := map[string]*cache.Image{}
	var variants []string
	for c := range complete {
		if m := variantName.FindStringSubmatch(c); m != nil && complete[m[1]] {
			variants = append(variants, c)
			continue
		}
		img, err := d.readCachedImage(c)
		if err != nil {
			d.log.Warn("skipping unreadable image cache", "cache", c, "error", err)
			continue
		}
		byCache[c] = img
		s.Images = append(s.Images, img)
	}
	slices.Sort(variants)
	for _, c := range variants {
		if img := byCache[variantName.FindStringSubmatch(c)[1]]; img != nil {
			img.Parts = append(img.Parts, c)
			if t := d.lastUsed(c); t.After(img.LastUsed) {
				img.LastUsed = t
			}
		}
	}
	for _, img := range s.Images {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for _, c := range img.Parts {
			for _, p := range []string{c, c + ".json", c + ".log"} {
				img.Own += cache.DiskUsage(filepath.Join(d.imgPath, p))
			}
		}
	}
	blobs, err := os.ReadDir(filepath.Join(d.oci.Root, "blobs", "sha256"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the layer store: %w", err)
	}
	for _, b := range blobs {
		s.Layers[b.Name()] = cache.DiskUsage(filepath.Join(d.oci.Root, "blobs", "sha256", b.Name()))
	}
	users, err := d.imageUsers()
	if err != nil {
		return nil, err
	}
	s.Finish(users)
	u := s.Usage
	d.usage.Store(&u)
	return s, nil
}

// readCachedImage reads what the cache container c says of its image.
func (d *Driver) readCachedImage(c string) (*cache.Image, error) {
	img := &cache.Image{Parts: []string{c}}
	img.ID, img.LastUsed = c, d.lastUsed(c)
	b, err := os.ReadFile(filepath.Join(d.imgPath, c+".json"))
	if err != nil {
		return nil, err
	}
	var m imageMarker
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("reading the marker of %s: %w", c, err)
	}
	img.Name = m.Image
	if !strings.HasPrefix(c, "oci-") {
		return img, nil
	}
	b, err = os.ReadFile(filepath.Join(d.imgPath, c, ociImageFile))
	if err != nil {
		return nil, err
	}
	var o oci.Image
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, fmt.Errorf("reading %s of %s: %w", ociImageFile, c, err)
	}
	img.Name, img.Digest = o.Reference, o.Digest
	for _, l := range o.Layers {
		img.Layers = append(img.Layers, l.Hex)
	}
	return img, nil
}

// lastUsed is when cache c was last used: its marker's modification time.
func (d *Driver) lastUsed(c string) time.Time {
	st, err := os.Stat(filepath.Join(d.imgPath, c+".json"))
	if err != nil {
		return time.Time{}
	}
	return st.ModTime().UTC()
}

// touchImage records a use of cache c now; a cache that is gone
// meanwhile is no error worth more than a log line.
func (d *Driver) touchImage(c string) {
	now := time.Now()
	if err := os.Chtimes(filepath.Join(d.imgPath, c+".json"), now, now); err != nil {
		d.log.Warn("recording an image's use", "cache", c, "error", err)
	}
}

// imageUsers maps each image's cache to the names of the guests made
// from it, sorted.
func (d *Driver) imageUsers() (map[string][]string, error) {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return nil, fmt.Errorf("listing guests: %w", err)
	}
	users := map[string][]string{}
	for _, e := range entries {
		if !e.IsDir() || !validName(e.Name()) {
			continue
		}
		m, err := d.readMetadata(e.Name())
		if err != nil {
			continue // not a guest, or one being made (under cacheMu)
		}
		c := guestCache(m)
		if m.Cache == "" {
			if lower := d.overlayCache(m.Name); lower != "" {
				c = lower
			}
		}
		if c != "" {
			users[c] = append(users[c], m.Name)
		}
	}
	return users, nil
}

// guestCache is the cache of the image guest m was made from. Guests
// made before metadata recorded it get theirs from the image's name or
// digest (a built image's packages were not recorded: such a guest's
// image is taken for the image without packages), or, for an overlay
// on a cache, which does depend on it, from their root file system
// (overlayCache).
func guestCache(m metadata) string {
	switch {
	case m.Cache != "":
		return m.Cache
	case m.Base != "":
		return m.Base
	case m.Digest != "":
		return ociCache(m.Digest)
	case imageref.IsReference(m.Image):
		return ""
	}
	img, err := imageFor(m.Image, nil)
	if err != nil {
		return ""
	}
	return img.cache
}

// overlayCache is the image cache guest name's overlay stacks on
// (that of the image, for a copy of it per id range), "" when its root
// file system is no overlay on a cache.
func (d *Driver) overlayCache(name string) string {
	c, err := golxc.NewContainer(name, d.path)
	if err != nil {
		return ""
	}
	defer c.Release()
	lower, _, ok := overlayPaths(c)
	if !ok {
		return ""
	}
	rel, err := filepath.Rel(d.imgPath, lower)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return ""
	}
	dir, _, _ := strings.Cut(rel, string(filepath.Separator))
	if m := variantName.FindStringSubmatch(dir); m != nil {
		return m[1]
	}
	return dir
}

// ociCache is the cache container of the OCI image of digest ("" when
// it is not sha256): 128 bits of it, as a container's name is its host
// name too, at most 64 bytes with the suffix of a shifted copy.
func ociCache(digest string) string {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hex) != 64 {
		return ""
	}
	return "oci-" + hex[:32]
}
