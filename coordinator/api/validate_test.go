package api

import (
	"net"
	"strings"
	"testing"

	corpusv1 "corpus/proto/corpus/v1"
)

// shellOrPath are characters no validated name, image, label or path
// may hold: shell and config metacharacters, quotes, whitespace.
const shellOrPath = ";|&$`'\"\\ \t\n\r\x00()<>*?#!{}[]%"

// FuzzValidators: whatever the validators accept is plain ASCII without
// metacharacters and without a ".." step.
func FuzzValidators(f *testing.F) {
	for _, s := range []string{"busybox", "debian/bookworm", "registry:5000/app:1.2", "app@sha256:ab", "eu-1", "_srv._tcp.db", "www.", "/srv/data", "../x", "a;b", "a..b", "\u0430", "[::1]:7401", "h.example.org:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		check := func(what string, ok bool) {
			if !ok {
				return
			}
			for _, r := range s {
				if r > 0x7e || r < 0x21 || strings.ContainsRune(shellOrPath, r) {
					t.Errorf("%s accepted %q with %q", what, s, r)
				}
			}
		}
		check("validImage", validImage(s) == nil)
		if validImage(s) == nil && (strings.Contains(s, "..") || strings.HasPrefix(s, "/")) {
			t.Errorf("validImage accepted %q", s)
		}
		check("ValidDNSName", ValidDNSName("name", s) == nil && s != "@")
		check("labelValueRE", labelValueRE.MatchString(s))
		check("pathRE", pathRE.MatchString(s))
		check("ValidID", ValidID("x", s, "x") == nil)
		check("FingerprintRE", FingerprintRE.MatchString(s))
		if err := ValidHostPort(s); err == nil {
			if h, _, _ := net.SplitHostPort(s); strings.ContainsAny(h, shellOrPath+"/") {
				t.Errorf("ValidHostPort accepted %q", s)
			}
		}
	})
}

func TestNormalizePackages(t *testing.T) {
	t.Parallel()
	spec := &corpusv1.GuestSpec{Image: "debian/bookworm", Packages: []string{"python3", "curl", "python3"}}
	if err := NormalizeSpec(spec); err != nil || strings.Join(spec.Packages, ",") != "curl,python3" {
		t.Errorf("NormalizeSpec = %v, packages %q; want nil, curl,python3", err, spec.Packages)
	}
	for _, bad := range [][]string{{"-oAPT::x=1"}, {"Python3"}, {"a b"}, make([]string, maxPackages+1)} {
		if err := NormalizeSpec(&corpusv1.GuestSpec{Image: "debian/bookworm", Packages: bad}); err == nil {
			t.Errorf("NormalizeSpec accepted packages %q", bad)
		}
	}
}

// TestValidCommand: a command and args are argv words: no NUL, a
// program named, bounded, and not beside packages.
func TestValidCommand(t *testing.T) {
	t.Parallel()
	const ref = "registry.example:5000/app:1"
	ok := &corpusv1.GuestSpec{Image: ref, Command: []string{"/bin/sh", "-c"}, Args: []string{"echo 'a b'\nexit 0", ""}}
	if err := NormalizeSpec(ok); err != nil {
		t.Errorf("NormalizeSpec(%q %q) = %v", ok.Command, ok.Args, err)
	}
	for name, bad := range map[string]*corpusv1.GuestSpec{
		"NUL":           {Image: ref, Args: []string{"a\x00b"}},
		"empty program": {Image: ref, Command: []string{"", "x"}},
		"too many":      {Image: ref, Args: make([]string, maxArgs+1)},
		"too long":      {Image: ref, Args: []string{strings.Repeat("x", maxArgBytes+1)}},
		"packages":      {Image: "debian/bookworm", Packages: []string{"curl"}, Args: []string{"x"}},
	} {
		if err := NormalizeSpec(bad); err == nil {
			t.Errorf("%s: NormalizeSpec accepted command %q args %q", name, bad.Command, bad.Args)
		}
	}
}

// TestNormalizeVolume: a new volume's size is rounded up to the block
// size here, once, so the node makes it exactly as desired (a size the
// node rounded itself differed from the desired one, and its agent
// resized the volume, its guest stopped, on every pass).
func TestNormalizeVolume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   *corpusv1.VolumeSpec
		want int64
		ok   bool
	}{
		{"aligned", &corpusv1.VolumeSpec{SizeBytes: 64 << 20}, 64 << 20, true},
		{"rounded up", &corpusv1.VolumeSpec{SizeBytes: 100000000}, 100003840, true},
		{"too small", &corpusv1.VolumeSpec{SizeBytes: 1 << 20}, 0, false},
		{"too large", &corpusv1.VolumeSpec{SizeBytes: 65 << 40}, 0, false},
		{"existing volume", &corpusv1.VolumeSpec{UseVolume: "db"}, 0, true},
		{"both", &corpusv1.VolumeSpec{UseVolume: "db", SizeBytes: 64 << 20}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &corpusv1.GuestSpec{Volume: tc.in}
			err := normalizeVolume(spec)
			if (err == nil) != tc.ok {
				t.Fatalf("normalizeVolume(%v) = %v, want ok=%v", tc.in, err, tc.ok)
			}
			if err == nil && spec.Volume.SizeBytes != tc.want {
				t.Errorf("normalizeVolume(%v) size = %d, want %d", tc.in, spec.Volume.SizeBytes, tc.want)
			}
		})
	}
}

// TestValidImageReference: an OCI reference must parse as one; a
// built image's name is not one and passes as before.
func TestValidImageReference(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"busybox", "debian/bookworm", "registry.example/team/app:1.2", "localhost:5000/app@sha256:" + strings.Repeat("ab", 32)} {
		if err := validImage(ok); err != nil {
			t.Errorf("validImage(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"registry.example/App:1", "localhost:5000/app@sha256:12", "registry.example/app:1:2"} {
		if err := validImage(bad); err == nil || !strings.Contains(err.Error(), "REGISTRY/REPO") && !strings.Contains(err.Error(), "image reference") {
			t.Errorf("validImage(%q) = %v, want an error about the reference", bad, err)
		}
	}
}

// TestValidImageRef: a release is made only from a reference to a
// registry; built image names, malformed references and blanks are
// refused with what a reference looks like.
func TestValidImageRef(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"registry.example/team/app:1.4", "127.0.0.1:5000/site:v1", "localhost/app",
		"registry.example/app@sha256:" + strings.Repeat("ab", 32)} {
		if err := ValidImageRef(ok); err != nil {
			t.Errorf("ValidImageRef(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "busybox", "debian/bookworm", "registry.example/App:1", "registry.example/app:bad tag",
		"registry.example/app@sha256:12", "registry.example/app;rm -rf /", "registry.example/../app:1", strings.Repeat("a", 300) + ".example/app"} {
		err := ValidImageRef(bad)
		if err == nil {
			t.Errorf("ValidImageRef(%q) = nil, want an error", bad)
			continue
		}
		if !strings.Contains(err.Error(), "REGISTRY/REPO") && !strings.Contains(err.Error(), "image") {
			t.Errorf("ValidImageRef(%q) = %v, want one naming what an image reference is", bad, err)
		}
	}
}
