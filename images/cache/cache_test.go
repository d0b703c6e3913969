package cache

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"corpus/drivers"
)

func testSet() *Set {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	img := func(id, name, digest string, used int, own int64, layers ...string) *Image {
		return &Image{CachedImage: drivers.CachedImage{ID: id, Name: name, Digest: digest, LastUsed: t0.Add(time.Duration(used) * time.Hour)}, Own: own, Layers: layers}
	}
	s := &Set{
		Images: []*Image{
			img("busybox", "busybox", "", 0, 100),
			img("oci-a", "reg/a:1", "sha256:aaa", 3, 10, "base", "a"),
			img("oci-b", "reg/b:1", "sha256:bbb", 1, 10, "base", "b"),
			img("oci-c", "reg/c:1", "sha256:ccc", 2, 10, "c"),
		},
		Layers: map[string]int64{"base": 1000, "a": 50, "b": 500, "c": 5, "stray": 7},
	}
	s.Finish(map[string][]string{"busybox": {"g1"}})
	return s
}

func ids(imgs []*Image) []string {
	var out []string
	for _, img := range imgs {
		out = append(out, img.ID)
	}
	return out
}

// TestFinish: sizes hold the layers, shared ones apart; the usage counts
// each layer once; the order is least recently used first.
func TestFinish(t *testing.T) {
	s := testSet()
	if got, want := ids(s.Images), []string{"busybox", "oci-b", "oci-c", "oci-a"}; !slices.Equal(got, want) {
		t.Errorf("order = %v, want %v", got, want)
	}
	a, _ := s.Find("reg/a:1")
	if a.SizeBytes != 1060 || a.SharedBytes != 1000 {
		t.Errorf("a: %d bytes, %d shared; want 1060 and 1000", a.SizeBytes, a.SharedBytes)
	}
	if want := (drivers.ImageCacheUsage{Bytes: 130 + 1562, Images: 4}); s.Usage != want {
		t.Errorf("usage = %+v, want %+v", s.Usage, want)
	}
}

// TestOverCap: the least recently used unused images go until the
// cache fits, a shared layer freed only with its last holder; an image
// in use or skipped stays.
func TestOverCap(t *testing.T) {
	s := testSet()
	for _, tc := range []struct {
		max  int64
		skip string
		want []string
	}{
		{s.Usage.Bytes, "", nil},
		{s.Usage.Bytes - 1, "", []string{"oci-b"}},                     // b frees 510
		{s.Usage.Bytes - 600, "", []string{"oci-b", "oci-c", "oci-a"}}, // b and c free 525: a too, and base with it
		{s.Usage.Bytes - 530, "oci-c", []string{"oci-b", "oci-a"}},
		{0, "", []string{"oci-b", "oci-c", "oci-a"}}, // busybox is used
	} {
		got := ids(s.OverCap(tc.max, func(img *Image) bool { return img.ID == tc.skip }))
		if !slices.Equal(got, tc.want) {
			t.Errorf("OverCap(%d, skip %q) = %v, want %v", tc.max, tc.skip, got, tc.want)
		}
	}
	b, _ := s.Find("sha256:bbb")
	if got := s.Orphans([]*Image{b}); !slices.Equal(got, []string{"b", "stray"}) {
		t.Errorf("Orphans(b) = %v, want b's own layer and the stray one", got)
	}
}

// TestFind: by ID, name, reference without or with the digest, digest;
// a missing image is ErrImageNotCached.
func TestFind(t *testing.T) {
	s := testSet()
	for _, name := range []string{"oci-a", "reg/a:1", "reg/a@sha256:aaa", "sha256:aaa"} {
		if img, err := s.Find(name); err != nil || img.ID != "oci-a" {
			t.Errorf("Find(%q) = %v, %v; want oci-a", name, img, err)
		}
	}
	if _, err := s.Find("reg/z:1"); !errors.Is(err, drivers.ErrImageNotCached) {
		t.Errorf("Find(missing) = %v, want ErrImageNotCached", err)
	}
	// The tag pulled again at another digest: the tag names both.
	s.Images = append(s.Images, &Image{CachedImage: drivers.CachedImage{ID: "oci-a2", Name: "reg/a:1", Digest: "sha256:aa2"}})
	if _, err := s.Find("reg/a:1"); !errors.Is(err, drivers.ErrImageAmbiguous) || !strings.Contains(err.Error(), "sha256:aa2") {
		t.Errorf("Find(a tag at two digests) = %v, want ErrImageAmbiguous listing the digests", err)
	}
	if img, err := s.Find("sha256:aa2"); err != nil || img.ID != "oci-a2" {
		t.Errorf("Find(sha256:aa2) = %v, %v; want oci-a2", img, err)
	}
}

// TestParseLimit reads the cap's forms and refuses nonsense.
func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		in    string
		bytes int64
		pct   float64
		ok    bool
	}{
		{"0", 0, 0, true}, {"20G", 20 << 30, 0, true}, {"512M", 512 << 20, 0, true}, {"25%", 0, 25, true},
		{"0%", 0, 0, false}, {"101%", 0, 0, false}, {"NaN%", 0, 0, false}, {"lots", 0, 0, false}, {"-1", 0, 0, false},
	} {
		n, p, err := ParseLimit(tc.in)
		if (err == nil) != tc.ok || n != tc.bytes || p != tc.pct {
			t.Errorf("ParseLimit(%q) = %d, %v, %v; want %d, %v, ok %v", tc.in, n, p, err, tc.bytes, tc.pct, tc.ok)
		}
	}
}
