package supervisor

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"corpus/internal/testrun"
)

// mountsUnder lists the mount points of this process's namespace at or
// below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var found []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			found = append(found, fields[4])
		}
	}
	return found
}

// TestImageProcessMounts: a process of an image's tree (a generation
// with Root), run as the image's user, finds /proc (its own
// /proc/self), /dev with null and urandom, and /tmp there though the
// tree has none of them; the mounts live in its own mount namespace:
// this one never sees them, and none is left once it stopped.
func TestImageProcessMounts(t *testing.T) {
	s, dir := newTest(t)
	root := testrun.BusyboxRoot(t, dir, "out")
	t.Cleanup(func() {
		if left := mountsUnder(t, root); len(left) > 0 {
			t.Errorf("mounts left under the image's tree: %v", left)
		}
	})
	os.Chmod(filepath.Join(root, "out"), 0o777)
	script := `bb=/bin/busybox
{ $bb cat /proc/self/status; echo x > /dev/null && echo devnull ok; $bb head -c 8 /dev/urandom | $bb wc -c; echo t > /tmp/t && echo tmp ok; } > /out/report 2>&1
exec $bb sleep 60`
	g := gen(dir, "r1", Process{Name: "web", Command: "the image's entrypoint", Argv: []string{"/bin/busybox", "sh", "-c", script}})
	g.Root, g.Dir, g.UID, g.GID = root, "/", 1000, 1000
	if res := s.Handle(Request{Op: OpStart, Generation: &g}); res.Error != "" {
		t.Fatal(res.Error)
	}
	report := filepath.Join(root, "out", "report")
	var got string
	waitFor(t, "the process's report", func() bool {
		b, _ := os.ReadFile(report)
		got = string(b)
		return strings.Contains(got, "tmp ok") || strings.Contains(got, "can't")
	})
	for _, want := range []string{"Uid:\t1000\t", "devnull ok", "\n8\n", "tmp ok"} {
		if !strings.Contains(got, want) {
			t.Errorf("the process's report lacks %q:\n%s", want, got)
		}
	}
	if m := mountsUnder(t, root); len(m) > 0 {
		t.Errorf("the image's mounts are seen outside its process: %v", m)
	}
	s.Handle(Request{Op: OpStop, Project: "site"})
	if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("the image's /tmp: %v, %v; want a sticky folder everyone writes", fi, err)
	}
}
