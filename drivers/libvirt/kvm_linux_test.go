package libvirt

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// TestKVMUsableByQEMUsUser: /dev/kvm counts only when QEMU's unprivileged
// user can open it: open to all, or to group kvm when the node is that
// group's. A root-only node (no udev) means TCG, and the reason says so.
func TestKVMUsableByQEMUsUser(t *testing.T) {
	dir := t.TempDir()
	node := filepath.Join(dir, "kvm")
	if err := os.WriteFile(node, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	own := strconv.Itoa(os.Getgid())
	for _, c := range []struct {
		mode  os.FileMode
		gid   string
		accel string
		why   string
	}{
		{0o600, own, "tcg", "mode 0600) is not open to group kvm"},
		{0o660, own, "kvm", ""},
		{0o660, "", "tcg", "not open to group kvm"},
		{0o660, own + "1", "tcg", "not open to group kvm"},
		{0o666, "", "kvm", ""},
		{0o640, own, "tcg", "mode 0640"},
	} {
		if err := os.Chmod(node, c.mode); err != nil {
			t.Fatal(err)
		}
		accel, why := kvmAt(node, c.gid)
		if accel != c.accel || !strings.Contains(why, c.why) || (c.why == "") != (why == "") {
			t.Errorf("mode %04o, kvm gid %q: %s (%q), want %s (%q)", c.mode, c.gid, accel, why, c.accel, c.why)
		}
	}
	if accel, why := kvmAt(filepath.Join(dir, "none"), own); accel != "tcg" || !strings.HasPrefix(why, "no ") {
		t.Errorf("missing node: %s (%q)", accel, why)
	}
}

// TestNestedHostCPU: on a host that is itself a VM, kvm guests get the
// host's CPU without arch-capabilities (which nested hypervisors refuse
// and QEMU aborts on); on bare metal, everything.
func TestNestedHostCPU(t *testing.T) {
	nested := "processor\t: 0\nflags\t\t: fpu vme hypervisor lm\n\nprocessor\t: 1\n"
	bare := "processor\t: 0\nflags\t\t: fpu vme lm\n"
	if got := cpuOffFor(nested); len(got) != 1 || got[0] != "arch-capabilities" {
		t.Errorf("nested host: %v", got)
	}
	if got := cpuOffFor(bare); got != nil {
		t.Errorf("bare metal: %v", got)
	}
	x, err := vmSpec{DomainType: "kvm", Name: "n", MemoryBytes: 1 << 30, VCPUs: 1, CPUOff: cpuOffFor(nested)}.marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(x, `<cpu mode="host-passthrough">`) || !strings.Contains(x, `<feature policy="disable" name="arch-capabilities"></feature>`) {
		t.Errorf("kvm domain on a nested host:\n%s", x)
	}
}

// TestKVMSpeedProbe runs the probe's guest for real: given time, it runs
// its loop to the end (the probe checks the registers it leaves); cut
// short, it reports too slow. It says what this host's KVM is worth.
func TestKVMSpeedProbe(t *testing.T) {
	// Given long enough the probe runs to its end. /dev/kvm here is a
	// nested hypervisor's, emulated: the loop took 18 s beside the other
	// test groups, and beside a CPU hog more than the minute this once
	// allowed (78 s scaled).
	limit := testrun.D(3 * time.Minute)
	if full, err := kvmSpeed("/dev/kvm", limit); errors.Is(err, errNotProbed) {
		t.Skip(err)
	} else if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
		t.Skipf("no usable /dev/kvm here: %v", err)
	} else if err != nil {
		t.Fatalf("probe given %s: %v", limit, err)
	} else {
		t.Logf("the probe ran to its end in %s", full)
	}
	if _, err := kvmSpeed("/dev/kvm", time.Nanosecond); !errors.Is(err, errTooSlow) {
		t.Errorf("probe given a nanosecond: %v, want too slow", err)
	}
	took, err := kvmSpeed("/dev/kvm", probeDeadline)
	accel, why := kvmVerdict(took, err)
	t.Logf("this host: %d loops took %s (err %v): %s %s", probeLoops, took, err, accel, why)
}

func TestKVMVerdict(t *testing.T) {
	for _, c := range []struct {
		err   error
		accel string
		why   string
	}{
		{nil, "kvm", ""},
		{errNotProbed, "kvm", ""},
		{errTooSlow, "tcg", "slower than QEMU emulates it"},
		{errors.New("creating a virtual machine: bad"), "tcg", "cannot run a test guest: creating a virtual machine"},
	} {
		accel, why := kvmVerdict(time.Millisecond, c.err)
		if accel != c.accel || !strings.Contains(why, c.why) || (c.why == "") != (why == "") {
			t.Errorf("%v: %s (%q), want %s (%q)", c.err, accel, why, c.accel, c.why)
		}
	}
}
