package runner

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func need(t *testing.T, cmds ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: test/sweep removes mounts, loop devices and namespaces: needs root")
	}
	for _, c := range cmds {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("skipping: no %s here", c)
		}
	}
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// started starts a process in a process group of its own that outlives
// its test unless the sweep ends it, as a daemon of a dead test binary
// does; it returns a channel closed when the process ends.
func started(t *testing.T, env []string, name string, args ...string) (*exec.Cmd, chan struct{}) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() { cmd.Wait(); close(ended) }()
	t.Cleanup(func() {
		select {
		case <-ended:
		default:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its whole group
			<-ended
		}
	})
	return cmd, ended
}

// sweepFolder returns test/sweep's path and a new folder under /tmp for
// a group's leftovers (the caller removes it).
func sweepFolder(t *testing.T) (sweep, root string) {
	t.Helper()
	sweep, err := filepath.Abs("../sweep")
	if err != nil {
		t.Fatal(err)
	}
	root, err = os.MkdirTemp("/tmp", "sweeptest.")
	if err != nil {
		t.Fatal(err)
	}
	return sweep, root
}

// TestSweep: what a group left behind (a process started with the
// group's ledger in its environment, one naming the group's folder on
// its command line, a mount, a loop device backed by a file there, a
// network namespace and a folder outside TMPDIR recorded in the ledger)
// is gone after test/sweep, which says what it removed; a second sweep
// finds nothing.
func TestSweep(t *testing.T) {
	need(t, "ip", "losetup", "mount", "bash")
	sweep, root := sweepFolder(t)
	ledger := root + ".ledger"
	outside, err := os.MkdirTemp("/tmp", "sweeptest-outside.")
	if err != nil {
		t.Fatal(err)
	}
	netns := fmt.Sprintf("sweeptest-%d", os.Getpid())
	// Whatever the sweep misses is removed here, so a failure leaves
	// nothing either.
	t.Cleanup(func() {
		for _, dir := range []string{root, outside} {
			exec.Command("umount", "-l", filepath.Join(dir, "mnt")).Run()
			if out, err := exec.Command("losetup", "-n", "-O", "NAME", "-j", filepath.Join(dir, "disk.img")).Output(); err == nil {
				for _, dev := range strings.Fields(string(out)) {
					exec.Command("losetup", "-d", dev).Run()
				}
			}
			os.RemoveAll(dir)
		}
		exec.Command("ip", "netns", "del", netns).Run()
		os.Remove(ledger)
	})

	sh(t, "ip", "netns", "add", netns)
	if err := os.WriteFile(ledger, []byte("netns "+netns+"\ndir "+outside+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, byEnv := started(t, []string{"CORPUS_TEST_LEDGER=" + ledger}, "sleep", "3600")
	// One process (exec), its command line naming the folder, as a
	// daemon's naming its socket does.
	_, byPath := started(t, nil, "bash", "-c", `exec -a "$0" sleep 3600`, outside+"/daemon.sock")
	if err := os.Mkdir(filepath.Join(root, "mnt"), 0o755); err != nil {
		t.Fatal(err)
	}
	sh(t, "mount", "-t", "tmpfs", "sweeptest", filepath.Join(root, "mnt"))
	img := filepath.Join(outside, "disk.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dev := sh(t, "losetup", "-f", "--show", img)

	out, err := exec.Command(sweep, root).CombinedOutput()
	if err != nil {
		t.Fatalf("test/sweep: %v:\n%s", err, out)
	}
	said := string(out)
	for _, want := range []string{"swept: process ", "swept: mount " + root + "/mnt", "swept: loop device " + dev + " (" + img + ")",
		"swept: network namespace " + netns, "swept: " + outside, "swept: files under " + root} {
		if !strings.Contains(said, want) {
			t.Errorf("test/sweep did not say %q:\n%s", want, said)
		}
	}
	for what, ended := range map[string]chan struct{}{"the process with the ledger in its environment": byEnv, "the process naming the folder": byPath} {
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Errorf("%s still runs", what)
		}
	}
	for _, p := range []string{root, outside, ledger, "/run/netns/" + netns} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there (%v)", p, err)
		}
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), root+"/mnt") {
		t.Errorf("%s/mnt is still mounted", root)
	}
	if back, _ := exec.Command("losetup", "-n", "-O", "BACK-FILE", dev).Output(); strings.Contains(string(back), img) {
		t.Errorf("%s is still attached to %s", dev, img)
	}

	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	again, err := exec.Command(sweep, root).CombinedOutput()
	if err != nil || len(again) != 0 {
		t.Errorf("a second sweep of an empty folder: %v: %q", err, again)
	}
}

// TestSweepRefuses: test/sweep removes only what lies under /tmp.
func TestSweepRefuses(t *testing.T) {
	sweep, _ := filepath.Abs("../sweep")
	dir := t.TempDir()
	if strings.HasPrefix(dir, "/tmp/") {
		dir = "/var/lib/not-a-test-folder"
	}
	out, err := exec.Command(sweep, dir).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "not under /tmp") {
		t.Errorf("test/sweep %s: %v: %s", dir, err, out)
	}
}

// TestSweepLibvirtDomains: a libvirt domain whose disk lies in a group's
// folder is stopped and undefined with the folder; --stale-domains
// removes those whose disk files under /tmp are all gone and keeps one
// whose disk is there. Each disk has an image under it outside /tmp
// (the VM images' cache), and each domain a volume (a block device, as
// a node's loop devices are), which --stale-domains does not count.
func TestSweepLibvirtDomains(t *testing.T) {
	need(t, "bash", "virsh")
	if err := exec.Command("virsh", "-q", "-c", "qemu:///system", "uri").Run(); err != nil {
		if os.Getenv("CORPUS_TEST_REQUIRE_LIBVIRT") == "1" {
			t.Fatalf("libvirtd does not answer on qemu:///system: %v", err)
		}
		t.Skip("skipping: libvirtd does not answer on qemu:///system")
	}
	sweep, root := sweepFolder(t)
	kept := t.TempDir()
	if !strings.HasPrefix(kept, "/tmp/") {
		kept = root + ".kept"
		if err := os.Mkdir(kept, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	gone := root + ".gone"
	doms := map[string]string{ // name: its disk
		fmt.Sprintf("sweeptest-group-%d", os.Getpid()): filepath.Join(root, "vm", "disk.qcow2"),
		fmt.Sprintf("sweeptest-gone-%d", os.Getpid()):  filepath.Join(gone, "disk.qcow2"),
		fmt.Sprintf("sweeptest-kept-%d", os.Getpid()):  filepath.Join(kept, "disk.qcow2"),
	}
	defined := func(name string) bool {
		return exec.Command("virsh", "-q", "-c", "qemu:///system", "dominfo", name).Run() == nil
	}
	t.Cleanup(func() {
		for name := range doms {
			if defined(name) {
				exec.Command("virsh", "-q", "-c", "qemu:///system", "undefine", name).Run()
			}
		}
		os.RemoveAll(root)
		os.RemoveAll(kept)
	})
	for name, disk := range doms {
		if disk != doms[fmt.Sprintf("sweeptest-gone-%d", os.Getpid())] {
			if err := os.MkdirAll(filepath.Dir(disk), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(disk, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		x := filepath.Join(t.TempDir(), "dom.xml")
		if err := os.WriteFile(x, []byte(fmt.Sprintf(`<domain type='qemu'><name>%s</name><memory unit='MiB'>64</memory>
<os><type arch='x86_64'>hvm</type></os><devices><disk type='file' device='disk'><driver name='qemu' type='qcow2'/>
<source file='%s'/><backingStore type='file'><format type='raw'/><source file='/var/cache/corpus-sweeptest/base.raw'/></backingStore>
<target dev='vda' bus='virtio'/></disk>
<disk type='block' device='disk'><source dev='/dev/corpus-sweeptest-volume'/><target dev='vdb' bus='virtio'/></disk></devices></domain>`, name, disk)), 0o600); err != nil {
			t.Fatal(err)
		}
		sh(t, "virsh", "-q", "-c", "qemu:///system", "define", x)
	}

	out, err := exec.Command(sweep, root).CombinedOutput()
	if err != nil {
		t.Fatalf("test/sweep: %v:\n%s", err, out)
	}
	group := fmt.Sprintf("sweeptest-group-%d", os.Getpid())
	if !strings.Contains(string(out), "swept: libvirt domain "+group) || defined(group) {
		t.Errorf("the group's domain after test/sweep (defined: %v):\n%s", defined(group), out)
	}
	out, err = exec.Command(sweep, "--stale-domains").CombinedOutput()
	if err != nil {
		t.Fatalf("test/sweep --stale-domains: %v:\n%s", err, out)
	}
	for name := range doms {
		want := name != fmt.Sprintf("sweeptest-kept-%d", os.Getpid()) // its disk is there
		if said := strings.Contains(string(out), "swept: libvirt domain "+name); said != (want && name != group) {
			t.Errorf("test/sweep --stale-domains said it swept %s: %v:\n%s", name, said, out)
		}
		if defined(name) == want {
			t.Errorf("domain %s defined after the sweeps: %v, want %v", name, defined(name), !want)
		}
	}
}
