// Package cache accounts for a node's image cache, whichever driver
// keeps it: images, each with the bytes of its own trees and the layers
// it holds (shared between images, counted once), the guests using
// them, which image a name designates, what goes first under a size cap
// (the least recently used images no guest uses), and which layers no
// image holds any more. It reads sizes from the disk but removes
// nothing: the driver does, under its own lock.
package cache

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"corpus/drivers"
	"corpus/internal/units"
)

// Image is one image of a cache.
type Image struct {
	drivers.CachedImage
	// Own is what its trees, markers and logs take on disk, layers
	// aside; Layers are the digests (hex) of the layers it holds.
	Own    int64
	Layers []string
	// Parts are the driver's names for where the image lies (cache
	// containers, folders), for the driver's removal.
	Parts []string
}

// Set is a cache as read from the disk.
type Set struct {
	// Images are least recently used first once Finish ran.
	Images []*Image
	// Layers maps each stored layer's digest (hex) to its bytes on disk.
	Layers map[string]int64
	// Usage is the cache's total, each layer counted once.
	Usage drivers.ImageCacheUsage
}

// Finish fills in each image's guests (users: image ID to guest names),
// size and shared part, sorts the images by last use and sums the
// usage.
func (s *Set) Finish(users map[string][]string) {
	held := map[string]int{}
	for _, img := range s.Images {
		for _, l := range img.Layers {
			held[l]++
		}
	}
	s.Usage = drivers.ImageCacheUsage{Images: len(s.Images)}
	for _, img := range s.Images {
		img.Guests = users[img.ID]
		img.SizeBytes, img.SharedBytes = img.Own, 0
		for _, l := range img.Layers {
			img.SizeBytes += s.Layers[l]
			if held[l] > 1 {
				img.SharedBytes += s.Layers[l]
			}
		}
		s.Usage.Bytes += img.Own
	}
	for _, n := range s.Layers {
		s.Usage.Bytes += n
	}
	slices.SortFunc(s.Images, func(a, b *Image) int {
		if c := a.LastUsed.Compare(b.LastUsed); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// Find returns the image name designates: its ID, name, reference
// with or without its digest, or digest. An image the set lacks is
// drivers.ErrImageNotCached; a name several images answer to is
// drivers.ErrImageAmbiguous, listing their digests.
func (s *Set) Find(name string) (*Image, error) {
	var found []*Image
	for _, img := range s.Images {
		base, _, _ := strings.Cut(img.Name, "@")
		if name == img.ID || name == img.Name || name == base ||
			(img.Digest != "" && (name == img.Digest || strings.HasSuffix(name, "@"+img.Digest))) {
			found = append(found, img)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("image %q: %w (see corpus image list)", name, drivers.ErrImageNotCached)
	case 1:
		return found[0], nil
	}
	var ids []string
	for _, img := range found {
		ids = append(ids, img.Digest)
	}
	return nil, fmt.Errorf("image %q: %w (%s): name one by its digest", name, drivers.ErrImageAmbiguous, strings.Join(ids, ", "))
}

// Unused returns the images no guest uses and skip (nil: none) keeps,
// least recently used first.
func (s *Set) Unused(skip func(*Image) bool) []*Image {
	var out []*Image
	for _, img := range s.Images {
		if len(img.Guests) == 0 && (skip == nil || !skip(img)) {
			out = append(out, img)
		}
	}
	return out
}

// OverCap returns the unused images (Unused with skip) to remove,
// least recently used first, for the cache to fit in max bytes: as
// many as it takes, or all of them when even that is not enough.
func (s *Set) OverCap(max int64, skip func(*Image) bool) []*Image {
	over := s.Usage.Bytes - max
	var out []*Image
	for _, img := range s.Unused(skip) {
		if over <= 0 {
			break
		}
		out = append(out, img)
		over -= img.Own
		for _, l := range img.Layers {
			if !s.held(l, out) {
				over -= s.Layers[l]
			}
		}
	}
	return out
}

// Orphans returns the layers no image outside gone holds, sorted.
func (s *Set) Orphans(gone []*Image) []string {
	var out []string
	for l := range s.Layers {
		if !s.held(l, gone) {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// held reports whether an image outside gone holds layer l.
func (s *Set) held(l string, gone []*Image) bool {
	for _, img := range s.Images {
		if !slices.Contains(gone, img) && slices.Contains(img.Layers, l) {
			return true
		}
	}
	return false
}

// ParseLimit reads a cache's cap as people write it: a size ("20G",
// units.ParseSize), a share of the disk ("25%"), or "0" for none. It
// returns the bytes, or the share in percent.
func ParseLimit(s string) (bytes int64, percent float64, err error) {
	if pct, ok := strings.CutSuffix(strings.TrimSpace(s), "%"); ok {
		p, err := strconv.ParseFloat(pct, 64)
		if err != nil || !(p > 0 && p <= 100) {
			return 0, 0, fmt.Errorf("image cache cap %q: a share must be above 0%% and at most 100%%", s)
		}
		return 0, p, nil
	}
	n, err := units.ParseSize(s)
	if err != nil {
		return 0, 0, fmt.Errorf("image cache cap: %w, or a share of the disk (25%%), or 0 for none", err)
	}
	return n, 0, nil
}
