package names

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestParseDomain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		msg      string // a substring of the error when want is ""
	}{
		{in: "web.example.test", want: "web.example.test"},
		{in: "Web.Example.TEST", want: "web.example.test"},
		{in: "web.example.test.", want: "web.example.test"},
		{in: "  web.example.test.\n", want: "web.example.test"},
		{in: "1x.example.com", want: "1x.example.com"},
		{in: "xn--bcher-kva.example", want: "xn--bcher-kva.example"},
		{in: "a.b", want: "a.b"},
		{in: "", msg: "is empty"},
		{in: " . ", msg: "is empty"},
		{in: "web", msg: "needs at least 2 labels"},
		{in: "web.example.test..", msg: "has a trailing dot"},
		{in: "*.example.test", msg: "wildcards are not supported"},
		{in: "a..b", msg: "has an empty label"},
		{in: "-a.b", msg: "starting or ending with a hyphen"},
		{in: "a-.b", msg: "starting or ending with a hyphen"},
		{in: "a_b.c", msg: "has '_'"},
		{in: "web.example.test:80", msg: "has ':'"},
		{in: "web .example.test", msg: "has ' '"},
		{in: "bücher.example", msg: "has 'ü'"},
		{in: strings.Repeat("a", 64) + ".test", msg: "longer than 63 characters"},
		{in: strings.Repeat("a.", 127) + "bb", msg: "longer than 253 characters"},
	} {
		got, err := ParseDomain(tc.in)
		switch {
		case tc.want != "" && (err != nil || string(got) != tc.want):
			t.Errorf("ParseDomain(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.want == "" && (err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg)):
			t.Errorf("ParseDomain(%q) = %q, %v; want an error wrapping ErrInvalid with %q", tc.in, got, err, tc.msg)
		}
	}
}

// TestValidators: the domain, host and label validators are one rule:
// a host name is labels joined by dots, a domain one of two labels or
// more, and each checks the canonical form only.
func TestValidators(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s                   string
		domain, host, label bool
	}{
		{"web.example.test", true, true, false},
		{"db", false, true, true},
		{"1-2.3", true, true, false},
		{"9web", false, true, true},
		{strings.Repeat("a", 63), false, true, true},
		{strings.Repeat("a", 64), false, false, false},
		{"Web.example.test", false, false, false},
		{"web.example.test.", false, false, false},
		{" web.example.test", false, false, false},
		{"", false, false, false},
		{"-web", false, false, false},
		{"web-", false, false, false},
		{"../etc", false, false, false},
		{"a/b", false, false, false},
	} {
		if got := ValidateDomain(tc.s) == nil; got != tc.domain {
			t.Errorf("ValidateDomain(%q) ok = %v, want %v", tc.s, got, tc.domain)
		}
		if got := ValidateHost(tc.s) == nil; got != tc.host {
			t.Errorf("ValidateHost(%q) ok = %v, want %v", tc.s, got, tc.host)
		}
		if got := ValidLabel(tc.s); got != tc.label {
			t.Errorf("ValidLabel(%q) = %v, want %v", tc.s, got, tc.label)
		}
	}
}

// labelRE is RFC 1123's label as a regular expression (what the LXC
// driver matched guest names with): the fuzz target holds ValidLabel to it.
var labelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// FuzzDomain: normalising lowercases and leaves a valid host name as it
// is; whatever ParseDomain accepts is
// canonical and valid as a domain and as a host; a host name is valid
// exactly when each of its labels is, and a label as RFC 1123 says.
func FuzzDomain(f *testing.F) {
	for _, s := range []string{"web.example.test", " Web.Example.TEST. ", "*.x", "a..b", "-a.b", "xn--bcher-kva.example", "bücher.de", "db", "a:80", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := NormalizeDomain(s)
		if strings.ToLower(n) != n || ValidateHost(n) == nil && NormalizeDomain(n) != n {
			t.Fatalf("NormalizeDomain(%q) = %q, not lowercase or not stable (%q)", s, n, NormalizeDomain(n))
		}
		if got := ValidLabel(s); got != labelRE.MatchString(s) {
			t.Fatalf("ValidLabel(%q) = %v, RFC 1123 says %v", s, got, !got)
		}
		host := ValidateHost(s) == nil
		labels := strings.Split(s, ".")
		each := len(s) <= 253
		for _, l := range labels {
			each = each && ValidLabel(l)
		}
		if host != each {
			t.Fatalf("ValidateHost(%q) ok = %v, its labels valid = %v", s, host, each)
		}
		if ValidateDomain(s) == nil != (host && len(labels) >= 2) {
			t.Fatalf("ValidateDomain(%q) ok = %v, want host %v with %d labels", s, !host, host, len(labels))
		}
		d, err := ParseDomain(s)
		if err != nil {
			return
		}
		if NormalizeDomain(string(d)) != string(d) || ValidateDomain(string(d)) != nil || ValidateHost(string(d)) != nil {
			t.Fatalf("ParseDomain(%q) = %q, not canonical and valid", s, d)
		}
		if string(d) != n {
			t.Fatalf("ParseDomain(%q) = %q, NormalizeDomain says %q", s, d, n)
		}
	})
}
