//go:build linux

package libvirt

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"corpus/drivers"
	"corpus/internal/names"
	"corpus/internal/revert"
)

// defaultMemory is a guest's memory when its spec sets no limit: a VM
// needs a size, and this boots the corpus images comfortably.
const defaultMemory = 512 << 20

// minMemory is the smallest memory the driver gives a VM.
const minMemory = 128 << 20

// guestDir is the folder holding one guest's disk and console log.
func (d *Driver) guestDir(name string) string { return filepath.Join(d.dir, "guests", name) }

// ConsoleLog is the file virtlogd writes the VM's serial console to
// (started afresh at each boot).
func (d *Driver) ConsoleLog(name string) string {
	return filepath.Join(d.guestDir(name), "console.log")
}

// validateSpec checks what Create needs before it touches the host.
func validateSpec(spec drivers.GuestSpec) (imageSpec, error) {
	if err := names.Validate("guest", spec.Name); err != nil {
		return imageSpec{}, err
	}
	if spec.ID == "" {
		return imageSpec{}, errors.New("empty guest id")
	}
	if len(spec.Packages) > 0 {
		// The scheduler places none here (Capabilities.PackageImages).
		return imageSpec{}, errors.New("VM images take no extra packages; install them in the project's install step")
	}
	img, ok := images[spec.Image]
	if !ok {
		return imageSpec{}, fmt.Errorf("image %q: %w", spec.Image, drivers.ErrUnknownImage)
	}
	if spec.MemoryBytes < 0 || (spec.MemoryBytes > 0 && spec.MemoryBytes < minMemory) {
		return imageSpec{}, fmt.Errorf("memory %d bytes: a VM needs at least %d MiB", spec.MemoryBytes, minMemory>>20)
	}
	if spec.CPUMillis < 0 {
		return imageSpec{}, fmt.Errorf("negative cpu limit %d", spec.CPUMillis)
	}
	if len(spec.Mounts) > 0 {
		return imageSpec{}, fmt.Errorf("binding host folders into a VM (give volumes as block devices): %w", drivers.ErrNotSupported)
	}
	if spec.Volume != nil {
		return imageSpec{}, fmt.Errorf("a volume kept by the driver (give volumes as block devices): %w", drivers.ErrNotSupported)
	}
	if err := validateVolumes(spec.BlockVolumes); err != nil {
		return imageSpec{}, fmt.Errorf("%w: %w", drivers.ErrInvalidSpec, err)
	}
	if n := spec.Network; n != nil {
		if !n.Address.IsValid() || !n.Gateway.IsValid() || n.Bridge == "" {
			return imageSpec{}, errors.New("network needs a bridge, an address and a gateway")
		}
		for _, s := range n.Search {
			if err := names.ValidateDomain(s); err != nil {
				return imageSpec{}, fmt.Errorf("search domain: %w", err)
			}
		}
		if n.MAC != "" {
			if _, err := net.ParseMAC(n.MAC); err != nil {
				return imageSpec{}, fmt.Errorf("mac %q: %w", n.MAC, err)
			}
		}
		if len(n.HostInterface) > 15 {
			return imageSpec{}, fmt.Errorf("host interface %q is longer than 15 bytes", n.HostInterface)
		}
	}
	return img, nil
}

// tapName is the host end of a guest's NIC: the agent's choice, or one
// derived from the guest's id.
func tapName(spec drivers.GuestSpec) string {
	if spec.Network.HostInterface != "" {
		return spec.Network.HostInterface
	}
	sum := sha256.Sum256([]byte(spec.ID))
	return fmt.Sprintf("vt%x", sum[:6])
}

// guestMAC is the guest NIC's address: the agent's choice, or a locally
// administered one derived from the guest's id.
func guestMAC(spec drivers.GuestSpec) string {
	if spec.Network.MAC != "" {
		return spec.Network.MAC
	}
	sum := sha256.Sum256([]byte(spec.ID))
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", sum[0], sum[1], sum[2])
}

// Create builds the guest's image when needed, makes its root disk as a
// qcow2 overlay on the image and defines its domain, stopped. Each of
// spec.BlockVolumes becomes a virtio disk (vdb, vdc, ...) whose serial
// the guest finds it by, and the kernel command line tells the image's
// corpus-volumes unit where to mount it. Host folders (spec.Mounts) are
// refused with drivers.ErrNotSupported.
func (d *Driver) Create(ctx context.Context, spec drivers.GuestSpec, progress drivers.ProgressFunc) error {
	img, err := validateSpec(spec)
	if err != nil {
		return fmt.Errorf("creating guest %s: %w", spec.Name, err)
	}
	l, err := d.client()
	if err != nil {
		return fmt.Errorf("creating guest %s: %w", spec.Name, err)
	}
	switch _, meta, err := d.lookup(l, spec.Name); {
	case err == nil && meta.ID == spec.ID:
		return nil
	case err == nil:
		return fmt.Errorf("creating guest %s: %w (%s)", spec.Name, drivers.ErrExists, meta.ID)
	case errors.Is(err, errForeign):
		return fmt.Errorf("creating guest %s: %w", spec.Name, err)
	case !errors.Is(err, drivers.ErrNotFound):
		return fmt.Errorf("creating guest %s: %w", spec.Name, err)
	}
	typ, err := d.hypervisor(l)
	if err != nil {
		return fmt.Errorf("creating guest %s: %w", spec.Name, err)
	}
	for _, p := range []string{filepath.Join(d.dir, "guests"), d.imageDir} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("creating guest %s: %w", spec.Name, err)
		}
		if typ == testHypervisor {
			continue // runs nothing, reads no disk
		}
		if err := searchable(p); err != nil {
			return fmt.Errorf("creating guest %s: %w", spec.Name, err)
		}
	}
	files, err := d.ensureImage(ctx, img, progress)
	if err != nil {
		return fmt.Errorf("creating guest %s: %w", spec.Name, err)
	}

	r := revert.New()
	defer r.Fail()
	dir := d.guestDir(spec.Name)
	if err := os.RemoveAll(dir); err != nil { // remains of an interrupted create
		return fmt.Errorf("creating guest %s: %w", spec.Name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating guest %s: %w", spec.Name, err)
	}
	r.Add(func() { os.RemoveAll(dir) })
	disk := filepath.Join(dir, "disk.qcow2")
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2",
		"-F", "raw", "-b", files.disk, disk).CombinedOutput()
	if err != nil {
		return fmt.Errorf("creating guest %s: making its disk: %w: %s", spec.Name, err, out)
	}

	if err := d.makeNodes(spec.Name, spec.BlockVolumes); err != nil {
		return fmt.Errorf("creating guest %s: %w", spec.Name, err)
	}

	mem := spec.MemoryBytes
	if mem == 0 {
		mem = defaultMemory
	}
	vs := vmSpec{
		DomainType:  domainType(typ),
		CPUOff:      nestedCPUOff(),
		Name:        spec.Name,
		Meta:        guestMeta{ID: spec.ID, Instance: d.instance, Image: spec.Image, CPUMillis: spec.CPUMillis, Env: envList(spec.Env)},
		MemoryBytes: mem,
		VCPUs:       int(max(1, (spec.CPUMillis+999)/1000)),
		Kernel:      files.kernel,
		Initrd:      files.initrd,
		Disk:        disk,
		Volumes:     d.vmVolumes(spec.Name, spec.BlockVolumes),
		ConsoleLog:  d.ConsoleLog(spec.Name),
	}
	if n := spec.Network; n != nil {
		vs.MAC = guestMAC(spec)
		vs.Meta.Address, vs.Meta.Bridge, vs.Meta.Tap = n.Address.Addr().String(), n.Bridge, tapName(spec)
		vs.Net = &guestNet{Address: n.Address, Gateway: n.Gateway, Nameservers: n.Nameservers, Search: n.Search}
	}
	x, err := vs.marshal()
	if err != nil {
		return fmt.Errorf("creating guest %s: %w", spec.Name, err)
	}
	if _, err := l.DomainDefineXML(x); err != nil {
		return fmt.Errorf("creating guest %s: defining its domain: %w", spec.Name, err)
	}
	r.Success()
	d.log.Info("guest created", "guest", spec.Name, "image", spec.Image)
	return nil
}

// errForeign means a domain of the guest's name exists but is not one of
// this driver instance's guests; the driver never touches it.
var errForeign = fmt.Errorf("a libvirt domain of that name belongs to someone else: %w", drivers.ErrExists)

// lookup finds a guest's domain and its corpus metadata. It returns
// drivers.ErrNotFound when no domain has that name and errForeign when
// the domain is not this instance's.
func (d *Driver) lookup(l *golibvirt.Libvirt, name string) (golibvirt.Domain, guestMeta, error) {
	if names.Validate("guest", name) != nil {
		return golibvirt.Domain{}, guestMeta{}, fmt.Errorf("guest %q: %w", name, drivers.ErrNotFound)
	}
	dom, err := l.DomainLookupByName(name)
	if golibvirt.IsNotFound(err) {
		return dom, guestMeta{}, fmt.Errorf("guest %s: %w", name, drivers.ErrNotFound)
	}
	if err != nil {
		return dom, guestMeta{}, fmt.Errorf("looking up domain %s: %w", name, err)
	}
	meta, ok, err := d.meta(l, dom)
	if err != nil {
		return dom, guestMeta{}, err
	}
	if !ok {
		return dom, guestMeta{}, fmt.Errorf("guest %s: %w", name, errForeign)
	}
	return dom, meta, nil
}

// meta reads corpus's metadata of dom; ok is false when the domain has
// none or belongs to another driver instance.
func (d *Driver) meta(l *golibvirt.Libvirt, dom golibvirt.Domain) (guestMeta, bool, error) {
	s, err := l.DomainGetMetadata(dom, int32(golibvirt.DomainMetadataElement), golibvirt.OptString{metadataNS}, 0)
	switch {
	case libvirtCode(err) == golibvirt.ErrNoDomainMetadata:
		return guestMeta{}, false, nil
	case golibvirt.IsNotFound(err):
		return guestMeta{}, false, fmt.Errorf("domain %s: %w", dom.Name, drivers.ErrNotFound)
	case err != nil:
		return guestMeta{}, false, fmt.Errorf("reading metadata of domain %s: %w", dom.Name, err)
	}
	m, err := parseMeta(s)
	if err != nil {
		return guestMeta{}, false, fmt.Errorf("domain %s: %w", dom.Name, err)
	}
	return m, m.Instance == d.instance, nil
}

// Start boots the guest and puts its NIC on the agent's bridge. Starting
// a running guest only checks its NIC is on the bridge.
func (d *Driver) Start(ctx context.Context, name string) error {
	l, err := d.client()
	if err != nil {
		return fmt.Errorf("starting guest %s: %w", name, err)
	}
	dom, meta, err := d.lookup(l, name)
	if err != nil {
		return fmt.Errorf("starting guest %s: %w", name, err)
	}
	state, _, err := l.DomainGetState(dom, 0)
	if err != nil {
		return fmt.Errorf("starting guest %s: %w", name, err)
	}
	if golibvirt.DomainState(state) != golibvirt.DomainRunning {
		if err := l.DomainCreate(dom); err != nil {
			return fmt.Errorf("starting guest %s: %w", name, err)
		}
	}
	typ, err := d.hypervisor(l)
	if err != nil {
		return fmt.Errorf("starting guest %s: %w", name, err)
	}
	if meta.Tap == "" || typ == testHypervisor {
		return nil
	}
	if err := d.plugTap(meta.Tap, meta.Bridge); err != nil {
		l.DomainDestroy(dom) // a VM that cannot be reached is not started
		return fmt.Errorf("starting guest %s: %w", name, err)
	}
	return nil
}

// Stop asks the guest to power off (ACPI button, then the guest agent)
// and pulls the plug when it has not within timeout.
func (d *Driver) Stop(ctx context.Context, name string, timeout time.Duration) error {
	l, err := d.client()
	if err != nil {
		return fmt.Errorf("stopping guest %s: %w", name, err)
	}
	dom, _, err := d.lookup(l, name)
	if err != nil {
		return fmt.Errorf("stopping guest %s: %w", name, err)
	}
	off := func() (bool, error) {
		state, _, err := l.DomainGetState(dom, 0)
		return golibvirt.DomainState(state) == golibvirt.DomainShutoff, err
	}
	if done, err := off(); err != nil || done {
		return err
	}
	// Hypervisors that cannot choose the method (libvirt's test one)
	// get a plain shutdown request.
	if err := l.DomainShutdownFlags(dom, golibvirt.DomainShutdownAcpiPowerBtn|golibvirt.DomainShutdownGuestAgent); err != nil {
		if err := l.DomainShutdown(dom); err != nil {
			d.log.Warn("asking guest to power off", "guest", name, "error", err)
		}
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if done, err := off(); err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopping guest %s: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := l.DomainDestroy(dom); err != nil && libvirtCode(err) != golibvirt.ErrOperationInvalid {
		return fmt.Errorf("stopping guest %s: %w", name, err)
	}
	return nil
}

// Destroy powers the guest off at once, undefines its domain and removes
// its disk. A domain of that name that is not this instance's guest is
// left alone, as if missing.
func (d *Driver) Destroy(ctx context.Context, name string) error {
	l, err := d.client()
	if err != nil {
		return fmt.Errorf("destroying guest %s: %w", name, err)
	}
	dom, _, err := d.lookup(l, name)
	switch {
	case errors.Is(err, drivers.ErrNotFound), errors.Is(err, errForeign):
		return nil
	case err != nil:
		return fmt.Errorf("destroying guest %s: %w", name, err)
	}
	if err := l.DomainDestroy(dom); err != nil && libvirtCode(err) != golibvirt.ErrOperationInvalid && !golibvirt.IsNotFound(err) {
		return fmt.Errorf("destroying guest %s: %w", name, err)
	}
	if err := l.DomainUndefineFlags(dom, golibvirt.DomainUndefineManagedSave|golibvirt.DomainUndefineSnapshotsMetadata); err != nil && !golibvirt.IsNotFound(err) {
		return fmt.Errorf("destroying guest %s: undefining its domain: %w", name, err)
	}
	if err := os.RemoveAll(d.guestDir(name)); err != nil {
		return fmt.Errorf("destroying guest %s: %w", name, err)
	}
	d.log.Info("guest destroyed", "guest", name)
	return nil
}

// Inspect returns the guest's observed state.
func (d *Driver) Inspect(ctx context.Context, name string) (drivers.GuestStatus, error) {
	l, err := d.client()
	if err != nil {
		return drivers.GuestStatus{}, fmt.Errorf("inspecting guest %s: %w", name, err)
	}
	dom, meta, err := d.lookup(l, name)
	if errors.Is(err, errForeign) {
		return drivers.GuestStatus{}, fmt.Errorf("inspecting guest %s: %w", name, drivers.ErrNotFound)
	}
	if err != nil {
		return drivers.GuestStatus{}, fmt.Errorf("inspecting guest %s: %w", name, err)
	}
	return d.status(l, dom, meta)
}

func (d *Driver) status(l *golibvirt.Libvirt, dom golibvirt.Domain, meta guestMeta) (drivers.GuestStatus, error) {
	state, maxMem, _, _, _, err := l.DomainGetInfo(dom)
	if golibvirt.IsNotFound(err) {
		return drivers.GuestStatus{}, fmt.Errorf("guest %s: %w", dom.Name, drivers.ErrNotFound)
	}
	if err != nil {
		return drivers.GuestStatus{}, fmt.Errorf("inspecting guest %s: %w", dom.Name, err)
	}
	return drivers.GuestStatus{
		ID: meta.ID, Name: dom.Name, Image: meta.Image,
		State:       stateOf(golibvirt.DomainState(state)),
		MemoryBytes: int64(maxMem) * 1024,
		CPUMillis:   meta.CPUMillis,
		Address:     meta.Address,
	}, nil
}

// stateOf maps a libvirt domain state to a guest state.
func stateOf(s golibvirt.DomainState) drivers.State {
	switch s {
	case golibvirt.DomainRunning, golibvirt.DomainBlocked:
		return drivers.StateRunning
	case golibvirt.DomainPaused, golibvirt.DomainPmsuspended:
		return drivers.StateFrozen
	case golibvirt.DomainShutdown:
		return drivers.StateStopping
	case golibvirt.DomainShutoff, golibvirt.DomainCrashed:
		return drivers.StateStopped
	default:
		return drivers.StateUnknown
	}
}

// List returns this instance's guests: the domains whose corpus metadata
// names it. Other domains on the libvirtd are never listed. A host with
// no libvirtd socket at all has none (so an agent offering the driver on
// a host without libvirt does not warn every pass); one whose libvirtd
// does not answer is an error.
func (d *Driver) List(ctx context.Context) ([]drivers.GuestStatus, error) {
	if _, err := os.Stat(d.socket); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	l, err := d.client()
	if err != nil {
		return nil, fmt.Errorf("listing guests: %w", err)
	}
	doms, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, fmt.Errorf("listing domains: %w", err)
	}
	var out []drivers.GuestStatus
	for _, dom := range doms {
		meta, ok, err := d.meta(l, dom)
		if errors.Is(err, drivers.ErrNotFound) {
			continue // gone since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("listing guests: %w", err)
		}
		if !ok {
			continue
		}
		st, err := d.status(l, dom, meta)
		if errors.Is(err, drivers.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing guests: %w", err)
		}
		out = append(out, st)
	}
	return out, nil
}

// searchable checks that every folder down to p may be searched by
// anyone: libvirt runs QEMU as an unprivileged user, which must reach
// the guests' disks and the images.
func searchable(p string) error {
	for dir := p; ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("QEMU cannot reach %s: folder %s is not searchable by others (mode %o); chmod o+x it", p, dir, fi.Mode().Perm())
		}
		if dir == "/" {
			return nil
		}
	}
}
