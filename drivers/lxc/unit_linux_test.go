//go:build linux && cgo

package lxc

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	golxc "github.com/lxc/go-lxc"

	"corpus/drivers"
)

func TestValidName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"web", true},
		{"web-1", true},
		{"1", true},
		{"", false},
		{"-web", false},
		{"web-", false},
		{"Web", false},
		{"a.b", false},
		{"..", false},
		{".images", false},
		{"a/b", false},
		{"_image-busybox", false},
		{string(make([]byte, 64)), false},
	} {
		if got := validName(tc.name); got != tc.want {
			t.Errorf("validName(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestValidateSpec(t *testing.T) {
	t.Parallel()
	ok := drivers.GuestSpec{ID: "1", Name: "web", Image: "busybox"}
	for _, tc := range []struct {
		name   string
		mutate func(*drivers.GuestSpec)
		want   error // nil: valid; errAny: some error
	}{
		{"valid", func(*drivers.GuestSpec) {}, nil},
		{"debian", func(s *drivers.GuestSpec) { s.Image = "debian/bookworm" }, nil},
		{"limits", func(s *drivers.GuestSpec) { s.MemoryBytes, s.CPUMillis = 1<<30, 1500 }, nil},
		{"debian with packages", func(s *drivers.GuestSpec) { s.Image, s.Packages = "debian/bookworm", []string{"python3", "libstdc++6"} }, nil},
		{"busybox with packages", func(s *drivers.GuestSpec) { s.Packages = []string{"python3"} }, errAny},
		{"package as an option", func(s *drivers.GuestSpec) { s.Image, s.Packages = "debian/bookworm", []string{"-oAPT::Get=x"} }, errAny},
		{"unknown image", func(s *drivers.GuestSpec) { s.Image = "debian/sid" }, drivers.ErrUnknownImage},
		{"no image", func(s *drivers.GuestSpec) { s.Image = "" }, drivers.ErrUnknownImage},
		{"no id", func(s *drivers.GuestSpec) { s.ID = "" }, errAny},
		{"bad name", func(s *drivers.GuestSpec) { s.Name = "a_b" }, errAny},
		{"negative memory", func(s *drivers.GuestSpec) { s.MemoryBytes = -1 }, errAny},
		{"negative cpu", func(s *drivers.GuestSpec) { s.CPUMillis = -1 }, errAny},
		{"cpu below minimum", func(s *drivers.GuestSpec) { s.CPUMillis = 9 }, errAny},
		{"env key with =", func(s *drivers.GuestSpec) { s.Env = map[string]string{"A=B": "1"} }, errAny},
		{"env value with newline", func(s *drivers.GuestSpec) { s.Env = map[string]string{"A": "1\n2"} }, errAny},
		{"env value with NUL", func(s *drivers.GuestSpec) { s.Env = map[string]string{"A": "1\x002"} }, errAny},
		{"env empty key", func(s *drivers.GuestSpec) { s.Env = map[string]string{"": "1"} }, errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := ok
			tc.mutate(&spec)
			_, err := validateSpec(spec)
			switch {
			case tc.want == nil && err != nil:
				t.Errorf("validateSpec(%+v) = %v, want nil", spec, err)
			case tc.want != nil && err == nil:
				t.Errorf("validateSpec(%+v) = nil, want an error", spec)
			case tc.want != nil && tc.want != errAny && !errors.Is(err, tc.want):
				t.Errorf("validateSpec(%+v) = %v, want %v", spec, err, tc.want)
			}
		})
	}
}

// TestImageForPackages checks that a set of packages, not its order,
// names an image of its own.
func TestImageForPackages(t *testing.T) {
	t.Parallel()
	base, _ := imageFor("debian/bookworm", nil)
	a, errA := imageFor("debian/bookworm", []string{"python3", "curl"})
	b, errB := imageFor("debian/bookworm", []string{"curl", "python3", "curl"})
	c, errC := imageFor("debian/bookworm", []string{"python3"})
	if errA != nil || errB != nil || errC != nil {
		t.Fatal(errA, errB, errC)
	}
	if a.cache != b.cache || a.name != b.name || a.name != "debian/bookworm +curl,python3" {
		t.Errorf("same set, different images: %q %q, %q %q", a.name, a.cache, b.name, b.cache)
	}
	if a.cache == c.cache || a.cache == base.cache || !slices.Contains(a.template.ExtraArgs, "--packages=curl,python3") {
		t.Errorf("images %q, %q, %q; args %q", base.cache, a.cache, c.cache, a.template.ExtraArgs)
	}
	if len(base.template.ExtraArgs) != 0 {
		t.Errorf("the base image's args changed: %q", base.template.ExtraArgs)
	}
}

func TestMillis(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		quota, period string
		want          int64
	}{
		{"50000", "100000", 500},
		{"250000", "100000", 2500},
		{"1000", "100000", 10},
		{"-1", "100000", 0},
		{"max", "100000", 0},
		{"", "", 0},
		{"50000", "", 0},
	} {
		if got := millis(tc.quota, tc.period); got != tc.want {
			t.Errorf("millis(%q, %q) = %d, want %d", tc.quota, tc.period, got, tc.want)
		}
	}
}

func TestGuestState(t *testing.T) {
	t.Parallel()
	for s, want := range map[golxc.State]drivers.State{
		golxc.STOPPED:  drivers.StateStopped,
		golxc.STARTING: drivers.StateStarting,
		golxc.RUNNING:  drivers.StateRunning,
		golxc.THAWED:   drivers.StateRunning,
		golxc.STOPPING: drivers.StateStopping,
		golxc.ABORTING: drivers.StateStopping,
		golxc.FREEZING: drivers.StateFrozen,
		golxc.FROZEN:   drivers.StateFrozen,
		golxc.State(0): drivers.StateUnknown,
	} {
		if got := guestState(s); got != want {
			t.Errorf("guestState(%v) = %s, want %s", s, got, want)
		}
	}
}

func TestNewRejectsRelativePath(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "lxc", "./lxc"} {
		if _, err := New(Config{Path: p}); err == nil {
			t.Errorf("New(Path %q) = nil error, want an error", p)
		}
	}
}

// TestCopyContainerConfig: a copy's config names its own rootfs and
// name, and no log file: the image store's copies had kept the log
// file of the agent that built them, and agents using them wrote into
// that long-gone agent's folder.
func TestCopyContainerConfig(t *testing.T) {
	t.Parallel()
	src, dst := filepath.Join(t.TempDir(), "built"), filepath.Join(t.TempDir(), "copy")
	if err := os.MkdirAll(filepath.Join(src, "rootfs", "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "rootfs", "etc", "hostname"), []byte("built\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := "lxc.net.0.type = veth\nlxc.log.file = /tmp/gone-agent/lxc/.images/built.log\nlxc.rootfs.path = dir:" + src + "/rootfs\nlxc.uts.name = built\nlxc.arch = amd64\n"
	if err := os.WriteFile(filepath.Join(src, "config"), []byte(cfg), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := copyContainer(src, dst, nil); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dst, "config"))
	if err != nil {
		t.Fatal(err)
	}
	want := "lxc.net.0.type = veth\nlxc.rootfs.path = dir:" + dst + "/rootfs\nlxc.uts.name = copy\nlxc.arch = amd64\n"
	if string(got) != want {
		t.Errorf("the copy's config:\n%s\nwant:\n%s", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "rootfs", "etc", "hostname")); err != nil || string(b) != "built\n" {
		t.Errorf("the copy's rootfs: %q, %v", b, err)
	}
}
