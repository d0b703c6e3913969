package deploy

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"corpus/agent/runtime"
	"corpus/agent/runtime/supervisor"
	"corpus/drivers"
	"corpus/internal/testrun"
)

// chrootDriver runs a guest's commands in a busybox root folder of the
// host (chroot); it does nothing else.
type chrootDriver struct {
	drivers.Driver
	root string
}

func (c chrootDriver) Exec(ctx context.Context, _ string, req drivers.ExecRequest) (int, error) {
	cmd := exec.CommandContext(ctx, "chroot", append([]string{c.root, "/bin/busybox"}, req.Argv...)...)
	cmd.Env = []string{"PATH=/bin"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = req.Stdin, req.Stdout, req.Stderr
	if cmd.Stdout == nil {
		cmd.Stdout = io.Discard
	}
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), nil
	}
	return 0, err
}

// TestLook reads current, run specs and the processes in one exec, and
// switches current from the release expected only: not from another,
// not to a release the guest does not hold. When the processes cannot
// be read, current is as it was.
func TestLook(t *testing.T) {
	dir := projectDir("site")[1:]
	root := testrun.BusyboxRoot(t, t.TempDir(), "dev", dir+"/releases/r1", dir+"/releases/r2", dir+"/.env",
		filepath.Dir(supervisor.Binary)[1:], filepath.Dir(supervisor.Socket)[1:])
	if err := unix.Mknod(filepath.Join(root, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chroot", root, "/bin/busybox", "--install", "-s", "/bin").CombinedOutput(); err != nil {
		t.Fatalf("busybox --install: %v: %s", err, out)
	}
	dir = filepath.Join(root, dir)
	if err := os.Symlink("releases/r1", filepath.Join(dir, "current")); err != nil {
		t.Fatal(err)
	}
	spec := `{"release":"r2","processes":[{"name":"web","command":"httpd"}]}`
	if err := os.WriteFile(filepath.Join(root, runFile("site", "r2")), []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	drv := chrootDriver{root: root}
	p := &Pipeline{runtime: &runtime.Runtime{}}
	ctx := context.Background()
	current := func() string {
		t.Helper()
		link, err := os.Readlink(filepath.Join(dir, "current"))
		if err != nil {
			t.Fatal(err)
		}
		return link
	}

	s, err := p.look(ctx, drv, "g", "site", 0, 0, 2, 3)
	if err != nil || s.cur != 1 || s.switched || s.running != nil || current() != "releases/r1" {
		t.Fatalf("a look: %+v, %v; current at %s", s, err, current())
	}
	if rs, ok, err := s.runSpec(ctx, drv, "g", "site", 2); err != nil || !ok || rs.Processes[0].Name != "web" {
		t.Errorf("the run spec of r2 as looked: %+v, %v, %v", rs, ok, err)
	}
	if _, ok, err := s.runSpec(ctx, drv, "g", "site", 3); err != nil || ok {
		t.Errorf("the run spec of r3 (none) as looked: %v, %v", ok, err)
	}
	if s, err = p.look(ctx, drv, "g", "site", 2, 1); err != nil || s.switched || current() != "releases/r1" {
		t.Errorf("a look switching from r2 (current at r1): %+v, %v; current at %s", s, err, current())
	}
	if s, err = p.look(ctx, drv, "g", "site", 1, 4); err != nil || s.switched || current() != "releases/r1" {
		t.Errorf("a look switching to r4 (not held): %+v, %v; current at %s", s, err, current())
	}
	if s, err = p.look(ctx, drv, "g", "site", 1, 2); err != nil || !s.switched || s.cur != 1 || current() != "releases/r2" {
		t.Errorf("a look switching from r1 to r2: %+v, %v; current at %s", s, err, current())
	}

	// A supervisor that fails: the switch is undone.
	if err := testrun.WriteExecutable(filepath.Join(root, supervisor.Binary), []byte("#!/bin/sh\necho broken >&2\nexit 3\n")); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(root, supervisor.Socket))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if s, err = p.look(ctx, drv, "g", "site", 2, 1); err == nil || current() != "releases/r2" {
		t.Errorf("a look switching from r2 to r1 whose supervisor fails: %+v, %v; current at %s, want r2", s, err, current())
	}
}
