package imageref

import (
	"strings"
	"testing"
)

func TestIsReference(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		image string
		want  bool
	}{
		{"busybox", false},
		{"debian/bookworm", false},
		{"library/nginx", false},
		{"nginx:1.25", false},
		{"registry.example/app:1.2", true},
		{"registry.example/team/app", true},
		{"localhost/app", true},
		{"localhost:5000/app:1", true},
		{"127.0.0.1:5000/app@sha256:" + "0123456789012345678901234567890123456789012345678901234567890123", true},
		{"[::1]:5000/app", true},
		{"registry.example/", false},
		{"", false},
	} {
		if got := IsReference(tc.image); got != tc.want {
			t.Errorf("IsReference(%q) = %t, want %t", tc.image, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	ref, err := Parse("registry.example/team/app", false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ref.Name(), "registry.example/team/app:latest"; got != want {
		t.Errorf("Parse(registry.example/team/app).Name() = %q, want %q", got, want)
	}
	if got := ref.Context().Registry.Scheme(); got != "https" {
		t.Errorf("scheme of a registry not marked insecure = %q, want https", got)
	}
	ref, err = Parse("registry.example:5000/app:1", true)
	if err != nil {
		t.Fatal(err)
	}
	if got := ref.Context().Registry.Scheme(); got != "http" {
		t.Errorf("scheme of an insecure registry = %q, want http", got)
	}
	for _, bad := range []string{"busybox", "debian/bookworm", "registry.example/App:1", "registry.example/app:bad tag", "registry.example/app@sha256:12"} {
		if _, err := Parse(bad, false); err == nil {
			t.Errorf("Parse(%q) = nil error, want one", bad)
		}
	}
}

func TestParseAny(t *testing.T) {
	t.Parallel()
	for image, want := range map[string]string{
		"nginx:1.25":                  "index.docker.io/library/nginx:1.25",
		"team/app":                    "index.docker.io/team/app:latest",
		"registry.example/team/app:1": "registry.example/team/app:1",
	} {
		ref, err := ParseAny(image)
		if err != nil || ref.Name() != want {
			t.Errorf("ParseAny(%q) = %v, %v; want %s", image, ref, err, want)
		}
	}
	if _, err := ParseAny("Bad/Name"); err == nil || !strings.Contains(err.Error(), "Bad/Name") {
		t.Errorf("ParseAny(Bad/Name) = %v, want an error naming it", err)
	}
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		registry string
		want     bool
	}{
		{"localhost", true},
		{"localhost:5000", true},
		{"127.0.0.1:5000", true},
		{"127.1.2.3", true},
		{"[::1]:5000", true},
		{"::1", true},
		{"10.0.0.1:5000", false},
		{"192.168.1.1", false},
		{"registry.example:5000", false},
		{"localhost.example", false},
	} {
		if got := Loopback(tc.registry); got != tc.want {
			t.Errorf("Loopback(%q) = %t, want %t", tc.registry, got, tc.want)
		}
	}
}

func TestValidDigest(t *testing.T) {
	t.Parallel()
	if err := ValidDigest("sha256:" + strings.Repeat("0f", 32)); err != nil {
		t.Errorf("ValidDigest(a sha256 digest) = %v", err)
	}
	for _, bad := range []string{"", "sha256:", "sha256:" + strings.Repeat("0F", 32), "sha512:" + strings.Repeat("0f", 32),
		"sha256:" + strings.Repeat("0f", 31), strings.Repeat("0f", 32), "sha256:" + strings.Repeat("0f", 32) + "\n"} {
		if err := ValidDigest(bad); err == nil {
			t.Errorf("ValidDigest(%q) = nil, want an error", bad)
		}
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host, want string
		ok         bool
	}{
		{"registry.example", "registry.example", true},
		{"registry.example:5000", "registry.example:5000", true},
		{"127.0.0.1:5000", "127.0.0.1:5000", true},
		{"docker.io", "index.docker.io", true},
		{"", "", false},
		{"https://registry.example", "", false},
		{"registry.example/team", "", false},
		{"Registry Example", "", false},
	} {
		got, err := Registry(tc.host)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Registry(%q) = %q, %v; want %q (ok %v)", tc.host, got, err, tc.want, tc.ok)
		}
	}
}
