package oci

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestLookupUser(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/home/app:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nstaff:x:50:\n"), 0o644)
	// An image whose /etc/passwd is a symlink out of its tree (to the
	// host's shadow, which has root) reads its own tree only, where the link
	// leads nowhere.
	bare := t.TempDir()
	os.MkdirAll(filepath.Join(bare, "etc"), 0o755)
	os.Symlink("../../../../../../../etc/shadow", filepath.Join(bare, "etc/passwd"))
	for _, tc := range []struct {
		root, user string
		uid, gid   uint32
		bad        bool
	}{
		{root, "", 0, 0, false},
		{root, "app", 1000, 1001, false},
		{root, "app:staff", 1000, 50, false},
		{root, "app:7", 1000, 7, false},
		{root, "4242", 4242, 4242, false},
		{root, "4242:4243", 4242, 4243, false},
		{root, "nobody", 0, 0, true},
		{root, "app:nogroup", 0, 0, true},
		{bare, "root", 0, 0, true},
		{bare, "5", 5, 5, false},
	} {
		uid, gid, err := LookupUser(tc.root, tc.user)
		if (err != nil) != tc.bad || !tc.bad && (uid != tc.uid || gid != tc.gid) {
			t.Errorf("LookupUser(%q) = %d, %d, %v; want %d, %d, error %t", tc.user, uid, gid, err, tc.uid, tc.gid, tc.bad)
		}
	}
}

func TestCommand(t *testing.T) {
	t.Parallel()
	img := &Image{}
	img.Config.Entrypoint = []string{"/bin/app", "--flag"}
	img.Config.Cmd = []string{"serve"}
	if got := img.Command(); !slices.Equal(got, []string{"/bin/app", "--flag", "serve"}) {
		t.Errorf("Command() = %q", got)
	}
	// Replaced as a Kubernetes container's command and args replace them.
	for _, tc := range []struct{ command, args, want []string }{
		{nil, nil, []string{"/bin/app", "--flag", "serve"}},
		{nil, []string{"migrate", "--all"}, []string{"/bin/app", "--flag", "migrate", "--all"}},
		{[]string{"/bin/sh"}, nil, []string{"/bin/sh"}},
		{[]string{"/bin/sh", "-c"}, []string{"echo hi"}, []string{"/bin/sh", "-c", "echo hi"}},
	} {
		if got := img.Argv(tc.command, tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("Argv(%q, %q) = %q, want %q", tc.command, tc.args, got, tc.want)
		}
	}
	if !slices.Equal(img.Config.Cmd, []string{"serve"}) {
		t.Errorf("Argv changed the image's cmd: %q", img.Config.Cmd)
	}
}

// TestStopSignal: an image's stop signal by name (with or without SIG),
// by number, SIGTERM when it names none; anything else is refused.
func TestStopSignal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want syscall.Signal
		bad  bool
	}{
		{"", syscall.SIGTERM, false},
		{"SIGQUIT", syscall.SIGQUIT, false},
		{"usr1", syscall.SIGUSR1, false},
		{"SIGKILL", syscall.SIGKILL, false},
		{"10", syscall.SIGUSR1, false},
		{"0", 0, true},
		{"65", 0, true},
		{"SIGNOPE", 0, true},
		{"TERM\n", syscall.SIGTERM, false},
	} {
		img := &Image{Config: v1.Config{StopSignal: tc.in}}
		got, err := img.StopSignal()
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("StopSignal(%q) = %v, %v; want %v (refused: %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}
