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
		check("validDNSName", validDNSName("name", s) == nil && s != "@")
		check("labelValueRE", labelValueRE.MatchString(s))
		check("pathRE", pathRE.MatchString(s))
		check("validID", validID("x", s, "x") == nil)
		check("fingerprintRE", fingerprintRE.MatchString(s))
		if err := validHostPort(s); err == nil {
			if h, _, _ := net.SplitHostPort(s); strings.ContainsAny(h, shellOrPath+"/") {
				t.Errorf("validHostPort accepted %q", s)
			}
		}
	})
}

func TestNormalizePackages(t *testing.T) {
	t.Parallel()
	spec := &corpusv1.GuestSpec{Image: "debian/bookworm", Packages: []string{"python3", "curl", "python3"}}
	if err := normalizeSpec(spec); err != nil || strings.Join(spec.Packages, ",") != "curl,python3" {
		t.Errorf("normalizeSpec = %v, packages %q; want nil, curl,python3", err, spec.Packages)
	}
	for _, bad := range [][]string{{"-oAPT::x=1"}, {"Python3"}, {"a b"}, make([]string, maxPackages+1)} {
		if err := normalizeSpec(&corpusv1.GuestSpec{Image: "debian/bookworm", Packages: bad}); err == nil {
			t.Errorf("normalizeSpec accepted packages %q", bad)
		}
	}
}
