package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"corpus/drivers/libvirt"
	"corpus/drivers/libvirt/libvirttest"
	"corpus/internal/testrun"
)

// vmImageCache is where the libvirt driver's images are built for the
// tests: outside the repository and every test's temporary folders, so
// CI and later runs reuse a built debian/bookworm. $CORPUS_LIBVIRT_IMAGES
// overrides it (test/run passes the same folder to its background build).
func vmImageCache() string {
	if d := os.Getenv("CORPUS_LIBVIRT_IMAGES"); d != "" {
		return d
	}
	return "/var/cache/corpus-test/libvirt-images"
}

// domainState returns the libvirt state of a domain, or an error when
// it is not defined.
func domainState(l *golibvirt.Libvirt, name string) (golibvirt.DomainState, golibvirt.Domain, error) {
	dom, err := l.DomainLookupByName(name)
	if err != nil {
		return 0, dom, err
	}
	st, _, err := l.DomainGetState(dom, 0)
	return golibvirt.DomainState(st), dom, err
}

// undefineOnCleanup removes a domain the agent may have left, whatever
// the test's outcome.
func undefineOnCleanup(t *testing.T, l *golibvirt.Libvirt, name string) {
	t.Cleanup(func() {
		if dom, err := l.DomainLookupByName(name); err == nil {
			l.DomainDestroy(dom)
			l.DomainUndefine(dom)
		}
	})
}

// TestVMGuestOnTestHypervisor: a libvirt guest goes through the agent
// like any other: created and started, repaired when stopped or deleted
// behind the agent's back, left running across an agent restart, and
// removed with the guest. libvirt's test hypervisor keeps domains in
// libvirtd's memory, so this needs no image or QEMU.
func TestVMGuestOnTestHypervisor(t *testing.T) {
	requireE2E(t)
	libvirttest.Ensure(t)
	hand := libvirttest.Connect(t, "test:///default") // also keeps the test hypervisor's state alive
	images := tempDir(t)
	if err := libvirt.WriteTestImage(images, "debian/bookworm"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CORPUS_LIBVIRT_URI", "test:///default")
	t.Setenv("CORPUS_LIBVIRT_IMAGES", images)
	t.Setenv("CORPUS_LIBVIRT_DIR", tempDir(t))
	c := newCluster(t)
	a := c.addAgent("n1")
	undefineOnCleanup(t, hand, "tvm1")

	c.mustCLI("guest", "create", "tvm1", "--driver", "libvirt", "--image", "debian/bookworm", "--memory", "256M", "--cpus", "1")
	st, dom, err := domainState(hand, "tvm1")
	if err != nil || st != golibvirt.DomainRunning {
		t.Fatalf("domain tvm1 = state %d, %v; want running", st, err)
	}

	running := func() error {
		if st, _, err := domainState(hand, "tvm1"); err != nil || st != golibvirt.DomainRunning {
			return fmt.Errorf("state %d: %v", st, err)
		}
		return nil
	}

	// Stopped by hand: the agent starts it again.
	if err := hand.DomainDestroy(dom); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "hand-stopped VM restarted", running)

	// Deleted by hand: the agent defines and starts it again.
	_, dom, _ = domainState(hand, "tvm1")
	hand.DomainDestroy(dom)
	if err := hand.DomainUndefine(dom); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "hand-deleted VM recreated", running)
	eventually(t, 10*time.Second, "status back to running", func() error {
		if v := c.guest("tvm1"); v.Status != "running" {
			return fmt.Errorf("guest is %v", v)
		}
		return nil
	})

	// An agent restart rediscovers the VM from its domain's metadata and
	// neither restarts nor duplicates it (the test hypervisor gives each
	// start a new domain id).
	_, before, _ := domainState(hand, "tvm1")
	a.kill()
	c.restartAgent(a)
	time.Sleep(5 * time.Second) // two resync periods
	_, after, err := domainState(hand, "tvm1")
	if err != nil || after.ID != before.ID {
		t.Errorf("after agent restart, domain id = %d, %v; want %d (not restarted)", after.ID, err, before.ID)
	}

	// A guest with a volume is placed (the driver gives volumes as
	// disks): its domain has the volume as a virtio disk with the
	// volume's serial, the volume is listed, and the host does not
	// mount it.
	c.mustCLI("guest", "create", "tvm2", "--driver", "libvirt", "--image", "debian/bookworm", "--memory", "256M", "--volume", "64M", "--volume-path", "/srv/db")
	undefineOnCleanup(t, hand, "tvm2")
	_, dom2, err := domainState(hand, "tvm2")
	if err != nil {
		t.Fatal(err)
	}
	x, err := hand.DomainGetXMLDesc(dom2, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<serial>tvm2</serial>", "<target dev='vdb' bus='virtio'/>", "corpus.vol=tvm2:/srv/db"} {
		if !strings.Contains(x, want) {
			t.Errorf("domain tvm2 lacks %s:\n%s", want, x)
		}
	}
	eventually(t, 15*time.Second, "volume tvm2 listed", func() error {
		var l volumeList
		if err := c.json(&l, "volume", "list"); err != nil {
			return err
		}
		if len(l.Volumes) != 1 || l.Volumes[0].Volume.GuestName != "tvm2" || l.Volumes[0].Volume.Observed.State != "ready" || l.Volumes[0].Volume.SizeBytes != fmt.Sprint(64<<20) {
			return fmt.Errorf("volumes = %+v", l.Volumes)
		}
		return nil
	})
	if m, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", a.proc.cmd.Process.Pid)); err != nil || strings.Contains(string(m), "/volumes/mnt/tvm2") {
		t.Errorf("the agent's mounts hold volume tvm2 (%v):\n%s", err, m)
	}
	// Deleted with --purge, the volume goes too.
	c.mustCLI("guest", "delete", "tvm2", "--purge")
	eventually(t, 30*time.Second, "volume purged with its guest", func() error {
		var l volumeList
		if err := c.json(&l, "volume", "list"); err != nil {
			return err
		}
		if len(l.Volumes) != 0 {
			return fmt.Errorf("volumes = %+v", l.Volumes)
		}
		if _, _, err := domainState(hand, "tvm2"); !golibvirt.IsNotFound(err) {
			return fmt.Errorf("domain tvm2: %v", err)
		}
		return nil
	})

	c.mustCLI("guest", "delete", "tvm1")
	eventually(t, 30*time.Second, "VM removed with its guest", func() error {
		if _, _, err := domainState(hand, "tvm1"); !golibvirt.IsNotFound(err) {
			return fmt.Errorf("domain still there: %v", err)
		}
		return nil
	})
}

// qemuCluster is a cluster of one node whose agent runs libvirt guests
// as real QEMU VMs (TCG without /dev/kvm).
type qemuCluster struct {
	c        *cluster
	a        *agentProc
	hand     *golibvirt.Libvirt // the test's own connection to qemu:///system
	client   string             // a namespace outside the node
	nodeAddr string             // the node's address, as outside traffic reaches it
	disks    string             // the driver's folder: disks, console logs
}

// startQEMUCluster skips unless CORPUS_TEST_DEBIAN is set, builds (or
// finds) the debian/bookworm VM image and starts a one-node cluster
// whose agent gives VMs disks in a folder QEMU can reach.
func startQEMUCluster(t *testing.T) qemuCluster {
	t.Helper()
	requireE2E(t)
	if os.Getenv("CORPUS_TEST_DEBIAN") == "" {
		t.Skip("slow: builds the debian/bookworm VM image and boots it; set CORPUS_TEST_DEBIAN=1 (CI does)")
	}
	libvirttest.Ensure(t)
	hand := libvirttest.Connect(t, "qemu:///system")
	if err := os.MkdirAll(vmImageCache(), 0o755); err != nil {
		t.Fatal(err)
	}
	// QEMU runs as libvirt's own user and must reach the guests' disks:
	// not in the agent's state folder, which only root may enter.
	disks, err := os.MkdirTemp("/var/tmp", "corpus-e2e-vm")
	if err != nil {
		t.Fatal(err)
	}
	testrun.Made("dir", disks)
	t.Cleanup(func() { os.RemoveAll(disks) })
	os.Chmod(disks, 0o755)
	// The agent runs in a namespace with no route to the Debian mirror:
	// the image is built (or found) first, from the test's namespace,
	// by the same driver code, into the cache the agent then uses.
	builder, err := libvirt.New(libvirt.Config{Dir: disks, ImageDir: vmImageCache()})
	if err != nil {
		t.Fatal(err)
	}
	if err := builder.EnsureImage(context.Background(), "debian/bookworm", func(m string) { t.Log(m) }); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CORPUS_LIBVIRT_URI", "qemu:///system")
	t.Setenv("CORPUS_LIBVIRT_IMAGES", vmImageCache())
	t.Setenv("CORPUS_LIBVIRT_DIR", disks)
	c := newCluster(t)
	a := c.addAgent("n1")
	client, nodeAddr := c.lab.addClient(a.node)
	a.kill()
	a.proc = c.startAgent(a, "--address", nodeAddr)
	c.waitAgentBack(a)
	return qemuCluster{c: c, a: a, hand: hand, client: client, nodeAddr: nodeAddr, disks: disks}
}

// booting says how far a VM's boot has come, for a wait to see progress
// in: the size and last line of its serial console (emulated boots take
// minutes on a loaded machine).
func (q qemuCluster) booting(name string) string {
	b, err := os.ReadFile(filepath.Join(q.disks, "guests", name, "console.log"))
	if err != nil {
		return "no console yet"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return fmt.Sprintf("console %d bytes: %q", len(b), lines[len(lines)-1])
}

// TestVMUnderQEMU boots a corpus-built debian/bookworm VM with real QEMU
// (TCG when the host has no /dev/kvm) and a data volume, and takes it
// through what a VM guest lives through, on one boot where it can (each
// one takes a minute or more under TCG):
//
//   - it gets its address on the node's bridge, answers ping from the
//     node and HTTP from outside through the node's NAT port, and guest
//     exec returns output and exit codes through the QEMU guest agent;
//   - its volume is a virtio disk the guest mounts at the volume's path,
//     never mounted by the host; enlarged while the VM runs, the guest's
//     file system grows online and `volume enlarge` returns once the
//     guest sees it;
//   - an agent restart leaves it running with its disk; a snapshot of
//     the running VM's volume is refused with what to do;
//   - powered off behind the agent's back, it is started again, its new
//     tap joins the bridge, NAT reaches it, the data and size are there;
//   - a trim follows the rules of every volume: refused below the data,
//     else the VM is stopped, shrunk offline and started again;
//   - --purge deletes the volume with the guest.
//
// Slow: the first run builds the image with debootstrap (minutes); CI
// runs it (CORPUS_TEST_DEBIAN=1).
func TestVMUnderQEMU(t *testing.T) {
	q := startQEMUCluster(t)
	c, a, hand, client, nodeAddr := q.c, q.a, q.hand, q.client, q.nodeAddr
	undefineOnCleanup(t, hand, "vm1")

	start := time.Now()
	c.mustCLI("guest", "create", "vm1", "--driver", "libvirt", "--image", "debian/bookworm",
		"--memory", "512M", "--cpus", "1", "--port", "8080:80",
		"--volume", "1G", "--volume-path", "/srv/data", "--detach")
	eventually(t, 5*time.Minute, "vm1 running", func() error {
		if v := c.guest("vm1"); v.Status != "running" {
			return fmt.Errorf("guest is %v", v)
		}
		return nil
	})
	running := time.Since(start)
	execReady := func() error {
		out, errOut, code := c.cli("guest", "exec", "vm1", "--", "true")
		if code != 0 {
			return fmt.Errorf("exit %d: %s%s (%s)", code, out, errOut, q.booting("vm1"))
		}
		return nil
	}
	eventually(t, 5*time.Minute, "guest agent answers", execReady)
	t.Logf("vm1: running %s after create, exec ready after %s", running.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	out, errOut, code := c.cli("guest", "exec", "vm1", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if code != 3 || strings.TrimSpace(out) != "out" || !strings.Contains(errOut, "err") {
		t.Errorf("guest exec exit 3 = code %d, stdout %q, stderr %q; want 3, out, err", code, out, errOut)
	}

	var g struct {
		Guest struct {
			Address string `json:"address"`
		} `json:"guest"`
	}
	if err := c.json(&g, "guest", "show", "vm1"); err != nil || g.Guest.Address == "" {
		t.Fatalf("guest show vm1: address %q, %v", g.Guest.Address, err)
	}
	// The guest agent starts after corpus-net, so exec finds the address.
	addrs := c.mustCLI("guest", "exec", "vm1", "--", "ip", "-4", "-o", "addr", "show")
	if !strings.Contains(addrs, " "+g.Guest.Address+"/") {
		t.Errorf("addresses inside vm1:\n%s\nwant %s", addrs, g.Guest.Address)
	}
	if out, err := exec.Command("nsenter", "--net=/run/netns/"+a.node.ns, "busybox", "ping", "-c", "1", "-W", "5", g.Guest.Address).CombinedOutput(); err != nil {
		t.Errorf("ping vm1 (%s) from its node: %v\n%s", g.Guest.Address, err, out)
	}

	// HTTP from outside, through the node's NAT port.
	serve := []string{"guest", "exec", "vm1", "--", "sh", "-c",
		"mkdir -p /www && echo hello-vm > /www/index.html && busybox httpd -p 80 -h /www </dev/null >/dev/null 2>&1"}
	c.mustCLI(serve...)
	eventually(t, 30*time.Second, "NAT to vm1", wantBody(httpIn(client), "http://"+nodeAddr+":8080/", "", "hello-vm"))

	// The volume: a virtio disk mounted at its path in the guest.
	dfSize := func() int64 {
		t.Helper()
		out := c.mustCLI("guest", "exec", "vm1", "--", "df", "-B1", "--output=size,target", "/srv/data")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		f := strings.Fields(lines[len(lines)-1])
		if len(f) != 2 || f[1] != "/srv/data" {
			t.Fatalf("df in vm1 = %q, want the volume mounted at /srv/data", out)
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		return n
	}
	wantData := func(when string) {
		t.Helper()
		if got := strings.TrimSpace(c.mustCLI("guest", "exec", "vm1", "--", "cat", "/srv/data/file")); got != "keep" {
			t.Errorf("file %s = %q, want keep", when, got)
		}
	}
	hostMountsNothing := func(when string) {
		t.Helper()
		if m, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", a.proc.cmd.Process.Pid)); err != nil || strings.Contains(string(m), "/volumes/mnt/vm1") {
			t.Errorf("%s, the agent mounts volume vm1 while its VM runs (%v):\n%s", when, err, m)
		}
	}
	if n := dfSize(); n < 900<<20 || n > 1<<30 {
		t.Errorf("volume in vm1 has %d bytes, want about 1 GiB", n)
	}
	mounts := c.mustCLI("guest", "exec", "vm1", "--", "sh", "-c", "readlink -f /dev/disk/by-id/virtio-vm1; findmnt -n -o SOURCE /srv/data")
	if f := strings.Fields(mounts); len(f) != 2 || f[0] != f[1] || !strings.HasPrefix(f[0], "/dev/vd") {
		t.Errorf("in vm1, /dev/disk/by-id/virtio-vm1 and the mount of /srv/data = %q, want the same virtio disk", mounts)
	}
	c.mustCLI("guest", "exec", "vm1", "--", "sh", "-c", "echo keep > /srv/data/file && sync")
	hostMountsNothing("at first")

	// Online grow: the command returns when the guest sees the new size.
	start = time.Now()
	out = c.mustCLI("volume", "enlarge", "vm1", "2G")
	enlarged := time.Since(start)
	n := dfSize()
	seen := time.Since(start)
	t.Logf("volume enlarge 1G -> 2G of a running VM: command %s, guest df shows it %s after the command started (%q)",
		enlarged.Round(time.Millisecond), seen.Round(time.Millisecond), strings.TrimSpace(out))
	if n < 1900<<20 || n > 2<<30 {
		t.Errorf("after volume enlarge, df in vm1 = %d bytes, want about 2 GiB", n)
	}
	wantData("after the grow")

	// An agent restart leaves the VM running with its disk: the domain
	// is not started again, the host mounts nothing, the data is there.
	_, before, err := domainState(hand, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	a.kill()
	a.proc = c.startAgent(a, "--address", nodeAddr)
	time.Sleep(5 * time.Second) // two resync periods
	if st, after, err := domainState(hand, "vm1"); err != nil || st != golibvirt.DomainRunning || after.ID != before.ID {
		t.Errorf("after agent restart, domain vm1 = state %d, id %d, %v; want running with id %d", st, after.ID, err, before.ID)
	}
	wantData("after agent restart")
	hostMountsNothing("after agent restart")

	// A running VM's volume cannot be frozen from the host.
	if _, errOut, code := c.cli("volume", "snapshot", "vm1"); code == 0 || !strings.Contains(errOut, "stop the guest") {
		t.Errorf("snapshot of a running VM's volume = exit %d, %q; want a refusal saying what to do", code, errOut)
	}

	// Powered off by hand: the agent starts the VM again, and its new
	// tap joins the node's bridge. (The page written above may not have
	// reached the disk before the plug was pulled; it is written again.)
	_, dom, err := domainState(hand, "vm1")
	if err != nil {
		t.Fatal(err)
	}
	if err := hand.DomainDestroy(dom); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Minute, "hand-stopped VM restarted", execReady)
	c.mustCLI(serve...)
	eventually(t, 30*time.Second, "NAT to the restarted vm1", wantBody(httpIn(client), "http://"+nodeAddr+":8080/", "", "hello-vm"))
	wantData("after the power-off")
	if n := dfSize(); n < 1900<<20 || n > 2<<30 {
		t.Errorf("after the power-off, df in vm1 = %d bytes, want about 2 GiB", n)
	}

	// What the volume uses is what the guest sees (the host's superblock
	// lags behind a mounted file system), so trim follows the rules of
	// every volume: refused below the data, else the VM is stopped for an
	// offline shrink and started again.
	c.mustCLI("guest", "exec", "vm1", "--", "sh", "-c", "dd if=/dev/zero of=/srv/data/big bs=1M count=200 2>/dev/null && sync")
	eventually(t, 30*time.Second, "volume vm1 shows 200M used", func() error {
		var l volumeList
		if err := c.json(&l, "volume", "list"); err != nil {
			return err
		}
		if len(l.Volumes) != 1 {
			return fmt.Errorf("volumes = %+v", l.Volumes)
		}
		if used, _ := strconv.ParseInt(l.Volumes[0].Volume.Observed.UsedBytes, 10, 64); used < 200<<20 {
			return fmt.Errorf("used = %d bytes", used)
		}
		return nil
	})
	if _, errOut, code := c.cli("volume", "trim", "vm1", "240M"); code == 0 || !strings.Contains(errOut, "nothing changed") {
		t.Errorf("trimming below used+margin = exit %d, %q; want a refusal", code, errOut)
	}
	c.mustCLI("guest", "exec", "vm1", "--", "rm", "/srv/data/big")
	c.mustCLI("volume", "trim", "vm1", "1536M")
	eventually(t, 5*time.Minute, "guest agent of vm1 answers after the trim", execReady)
	if n := dfSize(); n < 1400<<20 || n > 1536<<20 {
		t.Errorf("after trimming to 1.5 GiB, df in vm1 = %d bytes", n)
	}
	wantData("after the trim")

	c.mustCLI("guest", "delete", "vm1", "--purge")
	eventually(t, 2*time.Minute, "VM and volume removed", func() error {
		if _, _, err := domainState(hand, "vm1"); !golibvirt.IsNotFound(err) {
			return errors.New("domain vm1 still defined")
		}
		var l volumeList
		if err := c.json(&l, "volume", "list"); err != nil {
			return err
		}
		if len(l.Volumes) != 0 {
			return fmt.Errorf("volumes = %+v", l.Volumes)
		}
		return nil
	})
}
