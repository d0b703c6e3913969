package packaging

import (
	"os/exec"
	"strings"
	"testing"
)

// debVersion runs packaging/deb/version.
func debVersion(t *testing.T, v string) (string, error) {
	t.Helper()
	out, err := exec.Command("./deb/version", v).Output()
	return strings.TrimSpace(string(out)), err
}

// TestDebVersion: git describe output maps to Debian versions that sort
// as the releases do; anything else is refused.
func TestDebVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"v1.2.0":                  "1.2.0",
		"v1.2.0-5-gabc1234":       "1.2.0+5.gabc1234",
		"v1.2.0-5-gabc1234-dirty": "1.2.0+5.gabc1234+dirty",
		"v1.2.0-rc1":              "1.2.0~rc1",
		"v1.2.0+5":                "1.2.0+5",
		"v1.2.0+5-dirty":          "1.2.0+5+dirty",
		"v0.0.0+42":               "0.0.0+42",
		"6126a29":                 "0.0.0~g6126a29",
		"6126a29-dirty":           "0.0.0~g6126a29.dirty",
		"dev":                     "0.0.0~dev",
	} {
		if got, err := debVersion(t, in); err != nil || got != want {
			t.Errorf("deb/version %s = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a b", "v1.2.0;rm", "1.2.0_x"} {
		if got, err := debVersion(t, in); err == nil {
			t.Errorf("deb/version %q = %q, want a refusal", in, got)
		}
	}
	if _, err := exec.LookPath("dpkg"); err != nil {
		return
	}
	// Ascending: untagged builds, a release candidate, the release, later commits.
	order := []string{"6126a29", "v1.2.0-rc1", "v1.2.0", "v1.2.0+4", "v1.2.0+5", "v1.2.0+12", "v1.3.0"}
	for i := 1; i < len(order); i++ {
		a, _ := debVersion(t, order[i-1])
		b, _ := debVersion(t, order[i])
		if err := exec.Command("dpkg", "--compare-versions", a, "lt", b).Run(); err != nil {
			t.Errorf("dpkg --compare-versions %s lt %s: %v, want %s before %s", a, b, err, order[i-1], order[i])
		}
	}
}
