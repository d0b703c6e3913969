//go:build linux && cgo

package lxc

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"corpus/drivers"
	"corpus/images/oci/ocitest"
)

// pushLayered pushes to ref an image of busybox's layer (shared by all
// such images) and one layer of its own holding size random bytes; it
// returns the digest and the own layer's digest.
func pushLayered(t *testing.T, ref string, size int) (string, string) {
	t.Helper()
	junk := make([]byte, size)
	rand.Read(junk)
	own := ocitest.Layer(t, ocitest.File{Name: "data/"}, ocitest.File{Name: "data/junk", Body: string(junk)})
	h, err := own.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return ocitest.Push(t, ref, ocitest.Image(t, v1.Config{Cmd: []string{"/bin/sleep", "1000"}}, ocitest.BusyboxLayer(t), own)), h.Hex
}

// cachedByName returns the listed images by name.
func cachedByName(t *testing.T, d *Driver) map[string]drivers.CachedImage {
	t.Helper()
	list, usage, err := d.Images(t.Context())
	if err != nil {
		t.Fatalf("Images = %v", err)
	}
	if usage.Images != len(list) {
		t.Errorf("usage counts %d images, list has %d", usage.Images, len(list))
	}
	out := map[string]drivers.CachedImage{}
	for _, img := range list {
		out[img.Name] = img
	}
	return out
}

func (d *Driver) blobExists(hex string) bool {
	_, err := os.Stat(filepath.Join(d.oci.Root, "blobs", "sha256", hex))
	return err == nil
}

// TestImageCache lists a built image and two pulled ones sharing a
// layer with the guests using them, refuses to remove an image a guest
// uses, removes one no guest uses (keeping the layer the other holds),
// and prunes the rest once the guests are gone, layers included.
func TestImageCache(t *testing.T) {
	t.Parallel()
	d := newTestDriverWith(t, Config{ImageCacheMax: "0"})
	ctx := t.Context()
	reg := ocitest.Registry(t)
	one, oneLayer := pushLayered(t, reg+"/test/one:1", 64<<10)
	_, twoLayer := pushLayered(t, reg+"/test/two:1", 64<<10)

	if err := d.Create(ctx, busybox("bb"), nil); err != nil {
		t.Fatalf("Create(bb) = %v", err)
	}
	if err := d.Create(ctx, drivers.GuestSpec{ID: "id-one", Name: "one", Image: reg + "/test/one:1"}, nil); err != nil {
		t.Fatalf("Create(one) = %v", err)
	}
	if err := d.EnsureImage(ctx, reg+"/test/two:1", nil); err != nil {
		t.Fatalf("EnsureImage(two) = %v", err)
	}
	imgs := cachedByName(t, d)
	if len(imgs) != 3 {
		t.Fatalf("Images = %+v, want busybox, one and two", imgs)
	}
	bb, im1, im2 := imgs["busybox"], imgs[reg+"/test/one:1"], imgs[reg+"/test/two:1"]
	if !slices.Equal(bb.Guests, []string{"bb"}) || !slices.Equal(im1.Guests, []string{"one"}) || len(im2.Guests) != 0 {
		t.Errorf("guests: busybox %v, one %v, two %v; want [bb] [one] []", bb.Guests, im1.Guests, im2.Guests)
	}
	if im1.Digest != one || bb.Digest != "" {
		t.Errorf("digests: one %q, busybox %q; want %q and none", im1.Digest, bb.Digest, one)
	}
	if im1.SharedBytes == 0 || im1.SharedBytes != im2.SharedBytes || im1.SizeBytes <= im1.SharedBytes+64<<10 {
		t.Errorf("one: %d bytes, %d shared; two: %d shared; want the busybox layer shared and the rest its own", im1.SizeBytes, im1.SharedBytes, im2.SharedBytes)
	}
	usage := d.ImageCacheUsage()
	if sum := bb.SizeBytes + im1.SizeBytes + im2.SizeBytes; usage.Bytes != sum-im1.SharedBytes || usage.Images != 3 {
		t.Errorf("usage = %+v, want %d bytes (the shared layer once) in 3 images", usage, sum-im1.SharedBytes)
	}
	if bb.LastUsed.IsZero() || im2.LastUsed.Before(im1.LastUsed) {
		t.Errorf("last used: busybox %v, one %v, two %v; want two the latest", bb.LastUsed, im1.LastUsed, im2.LastUsed)
	}

	// In use: refused, guests named, nothing removed.
	for _, name := range []string{"busybox", reg + "/test/one:1", one} {
		_, _, err := d.RemoveImage(ctx, name)
		if !errors.Is(err, drivers.ErrImageInUse) || !strings.Contains(err.Error(), "guest(s) ") {
			t.Errorf("RemoveImage(%s) = %v, want ErrImageInUse naming the guest", name, err)
		}
	}
	if _, _, err := d.RemoveImage(ctx, "debian/bookworm"); !errors.Is(err, drivers.ErrImageNotCached) {
		t.Errorf("RemoveImage(debian/bookworm) = %v, want ErrImageNotCached", err)
	}
	if got := cachedByName(t, d); len(got) != 3 {
		t.Errorf("after refusals Images = %+v, want all 3", got)
	}

	// Unused: removed, its own layer too, the shared one kept.
	gone, freed, err := d.RemoveImage(ctx, reg+"/test/two:1")
	if err != nil || gone.ID != im2.ID || freed < im2.SizeBytes-im2.SharedBytes {
		t.Errorf("RemoveImage(two) = %+v, %d, %v; want it and at least %d bytes freed", gone, freed, err, im2.SizeBytes-im2.SharedBytes)
	}
	if d.blobExists(twoLayer) || !d.blobExists(oneLayer) {
		t.Errorf("after removing two: its layer there %v (want false), one's %v (want true)", d.blobExists(twoLayer), d.blobExists(oneLayer))
	}
	if _, err := os.Stat(filepath.Join(d.imgPath, im2.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("two's cache: %v, want it gone", err)
	}
	if got := d.ImageCacheUsage(); got.Images != 2 || got.Bytes != usage.Bytes-freed {
		t.Errorf("usage after removing two = %+v, want 2 images of %d bytes", got, usage.Bytes-freed)
	}
	// A guest of the removed image pulls it again.
	if err := d.Create(ctx, drivers.GuestSpec{ID: "id-two", Name: "two", Image: reg + "/test/two:1"}, nil); err != nil {
		t.Fatalf("Create(two) after removing its image = %v", err)
	}

	// Prune: nothing while guests use every image; all once they are gone.
	if pruned, freed, err := d.PruneImages(ctx); err != nil || len(pruned) != 0 || freed != 0 {
		t.Errorf("PruneImages with every image used = %+v, %d, %v; want nothing removed", pruned, freed, err)
	}
	for _, g := range []string{"bb", "one", "two"} {
		if err := d.Destroy(ctx, g); err != nil {
			t.Fatalf("Destroy(%s) = %v", g, err)
		}
	}
	_, before, err := d.Images(ctx) // destroys rewrote the caches' lists of clones
	if err != nil {
		t.Fatalf("Images = %v", err)
	}
	pruned, freed, err := d.PruneImages(ctx)
	if err != nil || len(pruned) != 3 || freed != before.Bytes {
		t.Errorf("PruneImages = %d images, %d bytes, %v; want 3 images and the %d bytes of the cache", len(pruned), freed, err, before.Bytes)
	}
	if got := d.ImageCacheUsage(); got != (drivers.ImageCacheUsage{}) {
		t.Errorf("usage after prune = %+v, want none", got)
	}
	if left, _ := os.ReadDir(filepath.Join(d.oci.Root, "blobs", "sha256")); len(left) != 0 {
		t.Errorf("layers left after prune: %v", left)
	}
	if err := d.Create(ctx, busybox("bb2"), nil); err != nil {
		t.Errorf("Create after prune = %v", err)
	}
}

// TestImageCacheCap: past the cap, building an image removes the least
// recently used images no guest uses until the cache fits, and keeps
// the images guests use.
func TestImageCacheCap(t *testing.T) {
	t.Parallel()
	d := newTestDriverWith(t, Config{ImageCacheMax: "0"})
	ctx := t.Context()
	reg := ocitest.Registry(t)
	for _, r := range []string{"old", "big"} {
		pushLayered(t, reg+"/test/"+r+":1", 2<<20)
	}
	pushLayered(t, reg+"/test/new:1", 1)

	if err := d.Create(ctx, busybox("bb"), nil); err != nil {
		t.Fatalf("Create(bb) = %v", err)
	}
	for _, r := range []string{"old", "big", "old"} { // old used last
		if err := d.EnsureImage(ctx, reg+"/test/"+r+":1", nil); err != nil {
			t.Fatalf("EnsureImage(%s) = %v", r, err)
		}
	}
	d.cacheMax = d.ImageCacheUsage().Bytes
	if err := d.EnsureImage(ctx, reg+"/test/new:1", nil); err != nil {
		t.Fatalf("EnsureImage(new) = %v", err)
	}
	imgs := cachedByName(t, d)
	for name, want := range map[string]bool{"busybox": true, "old": true, "big": false, "new": true} {
		if name != "busybox" {
			name = reg + "/test/" + name + ":1"
		}
		if _, ok := imgs[name]; ok != want {
			t.Errorf("after the cap: image %s kept %v, want %v", name, ok, want)
		}
	}
	if u := d.ImageCacheUsage(); u.Bytes > d.cacheMax || u.Images != 3 {
		t.Errorf("usage = %+v, want 3 images within the cap of %d bytes", u, d.cacheMax)
	}
}

// BenchmarkImages measures listing a cache of busybox and an OCI image
// (its unpacked tree and layers walked, the guests' metadata read):
// what `corpus image list` and each collection cost the node.
//
//	go test -run '^$' -bench Images -benchtime 50x ./drivers/lxc/
func BenchmarkImages(b *testing.B) {
	d := newTestDriverWith(b, Config{ImageCacheMax: "0"})
	ctx := b.Context()
	reg := ocitest.Registry(b)
	ocitest.Push(b, reg+"/test/app:1", ocitest.Image(b, v1.Config{Cmd: []string{"/bin/sleep", "1000"}}, ocitest.BusyboxLayer(b)))
	if err := d.Create(ctx, busybox("bb"), nil); err != nil {
		b.Fatal(err)
	}
	if err := d.EnsureImage(ctx, reg+"/test/app:1", nil); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := d.Images(ctx); err != nil {
			b.Fatal(err)
		}
	}
	u := d.ImageCacheUsage()
	b.ReportMetric(float64(u.Bytes), "cache-bytes")
}

// TestImageCacheLegacyGuests: a guest made before its metadata named
// its image's cache keeps an image its overlay stacks on from being
// removed, even where its image's name points elsewhere (a built
// image's packages were not recorded).
func TestImageCacheLegacyGuests(t *testing.T) {
	t.Parallel()
	d := newTestDriverWith(t, Config{ImageCacheMax: "0"})
	ctx := t.Context()
	for _, spec := range []drivers.GuestSpec{busybox("old"), func() drivers.GuestSpec { s := busybox("oldroot"); s.Privileged = true; return s }()} {
		if err := d.Create(ctx, spec, nil); err != nil {
			t.Fatalf("Create(%s) = %v", spec.Name, err)
		}
		m, err := d.readMetadata(spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		m.Cache, m.Image = "", "debian/bookworm"
		b, _ := json.Marshal(m)
		if err := os.WriteFile(filepath.Join(d.guestDir(spec.Name), metadataFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if d.clone == cloneCopy {
		t.Skip("guests here are copies: none depends on its image's cache")
	}
	imgs := cachedByName(t, d)
	if got := imgs["busybox"].Guests; !slices.Equal(got, []string{"old", "oldroot"}) {
		t.Errorf("busybox used by %v, want the overlay guests [old oldroot] (clone %s, idmapped %v)", got, d.clone, d.idmapped)
	}
	if _, _, err := d.RemoveImage(ctx, "busybox"); !errors.Is(err, drivers.ErrImageInUse) {
		t.Errorf("RemoveImage(busybox) under legacy overlay guests = %v, want ErrImageInUse", err)
	}
}
