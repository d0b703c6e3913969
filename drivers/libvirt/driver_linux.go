//go:build linux

package libvirt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"corpus/drivers"
)

var _ drivers.Driver = (*Driver)(nil)

// testHypervisor is what libvirt's test:///default driver calls itself.
// It keeps domains in libvirtd's memory and runs nothing, so the driver
// skips what needs a real VM (its tap device) on it.
const testHypervisor = "TEST"

// Driver runs guests as libvirt domains. It is safe for concurrent use;
// callers serialise operations on one guest, as drivers.Driver says.
type Driver struct {
	uri, socket string
	dir         string // guests' disks: <dir>/guests/<name>/
	imageDir    string
	instance    string
	log         *slog.Logger

	mu   sync.Mutex
	conn *golibvirt.Libvirt // nil until the first successful dial

	// probe is the fingerprint's call to libvirtd in flight (nil: none),
	// closed when it ends; probed is what the last one found.
	probeMu sync.Mutex
	probe   chan struct{}
	probed  drivers.Fingerprint
}

// fingerprintWait bounds how long Fingerprint waits for libvirtd: a
// libvirtd that accepts the connection but does not answer (stopped, or
// stuck) would otherwise hold the agent's enrollment and reports
// forever, as go-libvirt's calls take no deadline.
var fingerprintWait = 10 * time.Second

// New returns a driver owning cfg.Dir. It touches nothing on the host
// and does not dial libvirtd: a host without it still gets a driver, and
// Fingerprint reports it unhealthy until libvirtd answers.
func New(cfg Config) (*Driver, error) {
	if cfg.Dir == "" || !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("creating libvirt driver: dir %q is not absolute", cfg.Dir)
	}
	d := &Driver{
		uri:      cfg.URI,
		socket:   cfg.Socket,
		dir:      filepath.Clean(cfg.Dir),
		imageDir: cfg.ImageDir,
		instance: cfg.Instance,
		log:      cfg.Logger,
	}
	if d.uri == "" {
		d.uri = DefaultURI
	}
	if d.socket == "" {
		d.socket = DefaultSocket
	}
	if d.imageDir == "" {
		d.imageDir = filepath.Join(d.dir, "images")
	}
	if !filepath.IsAbs(d.imageDir) {
		return nil, fmt.Errorf("creating libvirt driver: image dir %q is not absolute", d.imageDir)
	}
	if d.instance == "" {
		d.instance = d.dir
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.log = d.log.With("component", "libvirt")
	if a, why := kvm(); a == "kvm" {
		d.log.Info("VMs run under KVM")
	} else {
		d.log.Info("VMs run under QEMU TCG (software emulation)", "reason", why)
	}
	return d, nil
}

// Close ends the driver's connection to libvirtd. Guests keep running.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn == nil {
		return nil
	}
	err := d.conn.Disconnect()
	d.conn = nil
	return err
}

// client returns the connection to libvirtd, dialling again when it was
// lost (libvirtd restarted, say).
func (d *Driver) client() (*golibvirt.Libvirt, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil && d.conn.IsConnected() {
		return d.conn, nil
	}
	if _, err := os.Stat(d.socket); err != nil {
		return nil, fmt.Errorf("libvirtd is not reachable at %s: %w", d.socket, err)
	}
	l := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(d.socket), dialers.WithLocalTimeout(5*time.Second)))
	if err := l.ConnectToURI(golibvirt.ConnectURI(d.uri)); err != nil {
		return nil, fmt.Errorf("connecting to libvirtd at %s (%s): %w", d.socket, d.uri, err)
	}
	d.conn = l
	return l, nil
}

// Name returns "libvirt".
func (d *Driver) Name() string { return Name }

// Capabilities reports exec through the QEMU guest agent and the images
// the driver builds. VMs cannot bind host folders; they get volumes as
// virtio disks (BlockVolumes), which grow while the VM runs.
func (d *Driver) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{
		Exec:        true,
		Images:      imageNames(),
		HostNetwork: true,
		Volumes:     drivers.BlockVolumes,
	}
}

// Fingerprint reports the driver healthy when libvirtd answers for its
// URI. Attributes say which hypervisor and acceleration VMs get; without
// /dev/kvm QEMU emulates the CPU (TCG), which works but is several times
// slower, and Detail says so.
//
// It waits for libvirtd at most fingerprintWait (or until ctx ends), then
// says libvirtd did not answer; the call goes on in the background, and
// later fingerprints wait for it rather than pile up more.
func (d *Driver) Fingerprint(ctx context.Context) drivers.Fingerprint {
	d.probeMu.Lock()
	done := d.probe
	if done == nil {
		done = make(chan struct{})
		d.probe = done
		go func() {
			fp := d.fingerprint()
			d.probeMu.Lock()
			d.probed, d.probe = fp, nil
			d.probeMu.Unlock()
			close(done)
		}()
	}
	d.probeMu.Unlock()
	t := time.NewTimer(fingerprintWait)
	defer t.Stop()
	select {
	case <-done:
		d.probeMu.Lock()
		defer d.probeMu.Unlock()
		return d.probed
	case <-t.C:
	case <-ctx.Done():
	}
	fp := d.baseFingerprint()
	fp.Detail = fmt.Sprintf("libvirtd at %s did not answer within %s (is it stopped or stuck?)", d.socket, fingerprintWait)
	return fp
}

// baseFingerprint is what the driver knows without asking libvirtd.
func (d *Driver) baseFingerprint() drivers.Fingerprint {
	return drivers.Fingerprint{Attributes: map[string]string{
		"libvirt.uri":    d.uri,
		"libvirt.socket": d.socket,
		"libvirt.accel":  accel(),
	}}
}

// fingerprint asks libvirtd for its hypervisor and version.
func (d *Driver) fingerprint() drivers.Fingerprint {
	fp := d.baseFingerprint()
	l, err := d.client()
	if err != nil {
		fp.Detail = err.Error()
		return fp
	}
	typ, err := l.ConnectGetType()
	if err != nil {
		fp.Detail = fmt.Sprintf("asking libvirtd for its hypervisor: %v", err)
		return fp
	}
	fp.Attributes["libvirt.hypervisor"] = typ
	if v, err := l.ConnectGetLibVersion(); err == nil {
		fp.Attributes["libvirt.version"] = fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000)
	}
	fp.Healthy = true
	if a, why := kvm(); typ != testHypervisor && a == "tcg" {
		fp.Detail = why + ": VMs run under QEMU TCG (software emulation, several times slower)"
	}
	return fp
}

// accel returns "kvm" when this host can run hardware-accelerated VMs,
// else "tcg".
func accel() string {
	a, _ := kvm()
	return a
}

// kvm says whether QEMU can use /dev/kvm and whether it is worth it, and
// if not, why. libvirt runs QEMU as an unprivileged user (libvirt-qemu,
// in group kvm on Debian), so the agent opening the node as root proves
// nothing: the node must be open to its group kvm or to all, as udev's
// rule makes it (root:kvm 0660). And a node that opens may still run
// guests slower than QEMU emulates them (kvmSpeed), so KVM is timed once
// per process.
func kvm() (accel, why string) {
	gid := ""
	if g, err := user.LookupGroup("kvm"); err == nil {
		gid = g.Gid
	}
	if accel, why := kvmAt("/dev/kvm", gid); accel != "kvm" {
		return accel, why
	}
	return kvmFastEnough()
}

// kvmFastEnough is kvmVerdict for this host's /dev/kvm, probed once.
var kvmFastEnough = sync.OnceValues(func() (string, string) {
	return kvmVerdict(kvmSpeed("/dev/kvm", probeDeadline))
})

// kvmVerdict turns a kvmSpeed result into an accel and its reason.
func kvmVerdict(took time.Duration, err error) (accel, why string) {
	switch {
	case errors.Is(err, errNotProbed):
		return "kvm", ""
	case errors.Is(err, errTooSlow):
		return "tcg", fmt.Sprintf("/dev/kvm runs guest code slower than QEMU emulates it (a test loop had not finished after %s; "+
			"a CPU running it natively needs a few milliseconds): this host is probably a VM whose hypervisor emulates nested guests", probeDeadline)
	case err != nil:
		return "tcg", fmt.Sprintf("/dev/kvm cannot run a test guest: %v", err)
	}
	return "kvm", ""
}

// kvmAt is kvm for the node at path and the kvm group's id (empty when
// there is no such group).
func kvmAt(path, kvmGid string) (accel, why string) {
	fi, err := os.Stat(path)
	if err != nil {
		return "tcg", "no " + path
	}
	perm := fi.Mode().Perm()
	st, _ := fi.Sys().(*syscall.Stat_t)
	kvmGroup := kvmGid != "" && st != nil && kvmGid == strconv.FormatUint(uint64(st.Gid), 10)
	if perm&0o006 != 0o006 && !(kvmGroup && perm&0o060 == 0o060) {
		return "tcg", fmt.Sprintf("%s (mode %04o) is not open to group kvm, so QEMU's user cannot use it; udev normally makes it root:kvm 0660", path, perm)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "tcg", fmt.Sprintf("opening %s: %v", path, err)
	}
	f.Close()
	return "kvm", ""
}

// nestedCPUOff is what a kvm guest's host-passthrough CPU leaves out when
// this host is itself a VM (its CPU flags say "hypervisor"). Hypervisors
// that run nested guests often refuse the guest's write of
// IA32_ARCH_CAPABILITIES, and QEMU then aborts at start ("failed to set
// MSR 0x10a"). Without the feature the guest kernel assumes the CPU
// needs every speculation mitigation: safe, a little slower. Bare-metal
// hosts pass everything through.
func nestedCPUOff() []string {
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	return cpuOffFor(string(cpuinfo))
}

func cpuOffFor(cpuinfo string) []string {
	for _, line := range strings.Split(cpuinfo, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			if slices.Contains(strings.Fields(v), "hypervisor") {
				return []string{"arch-capabilities"}
			}
			return nil
		}
	}
	return nil
}

// domainType is the libvirt domain type for hypervisor typ on this host.
func domainType(typ string) string {
	switch {
	case typ == testHypervisor:
		return "test"
	case accel() == "kvm":
		return "kvm"
	default:
		return "qemu"
	}
}

// hypervisor returns libvirtd's hypervisor type for the driver's URI.
func (d *Driver) hypervisor(l *golibvirt.Libvirt) (string, error) {
	typ, err := l.ConnectGetType()
	if err != nil {
		return "", fmt.Errorf("asking libvirtd for its hypervisor: %w", err)
	}
	return typ, nil
}

// libvirtCode returns the libvirt error number inside err, or -1.
func libvirtCode(err error) golibvirt.ErrorNumber {
	var e golibvirt.Error
	if errors.As(err, &e) {
		return golibvirt.ErrorNumber(e.Code)
	}
	return -1
}
