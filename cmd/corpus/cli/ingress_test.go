package cli

import (
	"fmt"
	"testing"
)

func TestParsePortSpec(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"8080:80": "8080:80/tcp", "53:53/udp": "53:53/udp", "5432": "5432:5432/tcp"} {
		p, err := parsePortSpec(in)
		if err != nil || fmt.Sprintf("%d:%d/%s", p.HostPort, p.GuestPort, p.Protocol) != want {
			t.Errorf("parsePortSpec(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, in := range []string{"", "a:b", "80:", ":80", "x/tcp"} {
		if _, err := parsePortSpec(in); err == nil {
			t.Errorf("parsePortSpec(%q) = nil error, want a refusal", in)
		}
	}
}

func FuzzParsePortSpec(f *testing.F) {
	for _, s := range []string{"8080:80", "53/udp", "1:2/tcp", "", ":", "80:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePortSpec(s)
		if err == nil && (p == nil || p.Protocol == "") {
			t.Fatalf("parsePortSpec(%q) = %v without an error", s, p)
		}
	})
}
