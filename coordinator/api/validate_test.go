package api

import (
	"net"
	"strings"
	"testing"
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
