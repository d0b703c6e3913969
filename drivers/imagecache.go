package drivers

import (
	"context"
	"errors"
	"time"
)

// CachedImage is one image a driver keeps on its node: an image it built
// (busybox, debian/bookworm with packages) or an OCI image it pulled and
// unpacked, with the copies of it made per id range.
type CachedImage struct {
	// ID names the image in the cache (its folder), unique on the node.
	ID string
	// Name is a built image's name ("debian/bookworm +curl") or the
	// reference an OCI image was first pulled by.
	Name string
	// Digest is an OCI image's manifest digest; empty for a built image.
	Digest string
	// SizeBytes is what the image takes on disk: its trees and its
	// layers. SharedBytes is the part of it in layers other images of
	// the cache hold too (freed only with the last of them).
	SizeBytes   int64
	SharedBytes int64
	// LastUsed is when a guest was last made from the image, or it was
	// last built or asked for.
	LastUsed time.Time
	// Guests are the names of the node's guests made from the image.
	Guests []string
}

// ImageCacheUsage is what a node's image cache holds: bytes on disk
// (shared layers counted once) and how many images.
type ImageCacheUsage struct {
	Bytes  int64
	Images int
}

// ImageCache is a driver that keeps images on its node and can list and
// remove them. Every method is safe for concurrent use with Create.
type ImageCache interface {
	// Images lists the cached images, least recently used first, and
	// the cache's usage.
	Images(ctx context.Context) ([]CachedImage, ImageCacheUsage, error)
	// RemoveImage removes the image named by its ID, name, reference or
	// digest, and the layers no other image holds; it returns the image
	// and the bytes freed. An image a guest uses is ErrImageInUse
	// (wrapped, naming the guests) and stays; an image the cache lacks
	// is ErrImageNotCached, a name several images answer to
	// ErrImageAmbiguous.
	RemoveImage(ctx context.Context, image string) (CachedImage, int64, error)
	// PruneImages removes every image no guest uses and every layer no
	// remaining image holds, and returns the images removed and the
	// bytes freed.
	PruneImages(ctx context.Context) ([]CachedImage, int64, error)
	// ImageCacheUsage is the usage last measured (by any of the above,
	// or after an image was pulled or built); it does not touch the disk.
	ImageCacheUsage() ImageCacheUsage
}

var (
	// ErrImageInUse means guests of the node were made from the image.
	ErrImageInUse = errors.New("image is used by guests")
	// ErrImageNotCached means the node's cache has no such image.
	ErrImageNotCached = errors.New("image is not in the node's cache")
	// ErrImageAmbiguous means a name designates several images (one
	// reference pulled at several digests): name one by its digest.
	ErrImageAmbiguous = errors.New("name designates several images")
)
