//go:build linux && cgo

package lxc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	golxc "github.com/lxc/go-lxc"

	"corpus/drivers"
	"corpus/internal/atomicfile"
	"corpus/internal/names"
)

// metadataFile marks a container as a corpus guest and records its identity.
const metadataFile = "corpus.json"

// metadata is the content of a guest's corpus.json.
type metadata struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Image   string    `json:"image"`
	Created time.Time `json:"created"`
	// IDMap is where the guest's user namespace maps its ids; nil for a
	// privileged guest.
	IDMap *idmap `json:"idmap,omitempty"`
	// Privileged is set for a guest made privileged on purpose; a guest
	// with neither this nor IDMap predates unprivileged guests and is
	// confined at its next start (see confineLegacy).
	Privileged bool `json:"privileged,omitempty"`
	// Mounts are the host folders bound into the guest, whose files an
	// unprivileged guest needs to own (see shiftMounts).
	Mounts []string `json:"mounts,omitempty"`
	// Base is the image cache whose root file system the guest's
	// overlay stacks on through its image mount (see idmount_linux.go);
	// empty for a guest without one (privileged, a copied root file
	// system, or stacked on a copy of the image shifted to its ids).
	Base string `json:"base,omitempty"`
	// Digest is what the guest's OCI image reference resolved to, and
	// Command the image's command the guest runs (see oci_linux.go).
	Digest  string   `json:"digest,omitempty"`
	Command []string `json:"command,omitempty"`
	// Ports are the ports the OCI image exposes (oci.Image.Ports).
	Ports []string `json:"ports,omitempty"`
	// Cache is the image cache the guest was made from (of the image
	// itself, not of its copy for the guest's ids): the image the node's
	// cache keeps for it (see cache_linux.go).
	Cache string `json:"cache,omitempty"`
}

// validName accepts DNS labels (names.ValidLabel), the only guest names
// accepted; it also keeps names from escaping the lxcpath.
func validName(name string) bool { return names.ValidLabel(name) }

// validateSpec checks what Create needs before it touches the host.
func validateSpec(spec drivers.GuestSpec) (imageSpec, error) {
	if !validName(spec.Name) {
		return imageSpec{}, fmt.Errorf("invalid guest name %q (want a DNS label)", spec.Name)
	}
	if spec.ID == "" {
		return imageSpec{}, errors.New("empty guest id")
	}
	img, err := imageFor(spec.Image, spec.Packages)
	if err != nil {
		return imageSpec{}, err
	}
	if !img.ref && len(spec.Command)+len(spec.Args) > 0 {
		return imageSpec{}, fmt.Errorf("image %s is built by the node and has no entrypoint or cmd to replace: a command and args are for OCI images: %w", spec.Image, drivers.ErrInvalidSpec)
	}
	for _, a := range append(slices.Clone(spec.Command), spec.Args...) {
		if strings.ContainsRune(a, 0) {
			return imageSpec{}, fmt.Errorf("the command or its args have a NUL byte: %w", drivers.ErrInvalidSpec)
		}
	}
	if spec.MemoryBytes < 0 {
		return imageSpec{}, fmt.Errorf("negative memory limit %d", spec.MemoryBytes)
	}
	// The kernel refuses CFS quotas under 1 ms per 100 ms period.
	if spec.CPUMillis < 0 || (spec.CPUMillis > 0 && spec.CPUMillis < 10) {
		return imageSpec{}, fmt.Errorf("cpu limit %d millicores is not 0 or at least 10", spec.CPUMillis)
	}
	for k, v := range spec.Env {
		if err := validEnv(k, v); err != nil {
			return imageSpec{}, err
		}
	}
	if err := validNetwork(spec.Network); err != nil {
		return imageSpec{}, err
	}
	for _, m := range spec.Mounts {
		// Both sides go into an lxc.mount.entry line: absolute, clean,
		// without whitespace.
		for _, p := range []string{m.Source, m.Target} {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" || strings.ContainsAny(p, " \t\n\x00") {
				return imageSpec{}, fmt.Errorf("invalid mount path %q", p)
			}
		}
	}
	return img, nil
}

// validNetwork checks what goes into lxc.net lines: names and addresses
// only, so no value can inject configuration.
func validNetwork(n *drivers.Network) error {
	if n == nil {
		return nil
	}
	if l := len(n.Bridge); l == 0 || l > 15 || strings.IndexFunc(n.Bridge, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) >= 0 {
		return fmt.Errorf("invalid bridge name %q", n.Bridge)
	}
	if l := len(n.HostInterface); l > 15 || strings.IndexFunc(n.HostInterface, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
	}) >= 0 {
		return fmt.Errorf("invalid host interface name %q", n.HostInterface)
	}
	if !n.Address.IsValid() || !n.Address.Addr().Is4() {
		return fmt.Errorf("invalid guest address %q (want IPv4 with prefix length)", n.Address)
	}
	if n.Gateway.IsValid() && !n.Address.Contains(n.Gateway) {
		return fmt.Errorf("gateway %s is outside the guest's subnet %s", n.Gateway, n.Address.Masked())
	}
	for _, s := range n.Search {
		if s == "" || len(s) > 253 || strings.ContainsAny(s, " \t\n\x00") {
			return fmt.Errorf("invalid resolver search domain %q", s)
		}
	}
	if n.MAC != "" {
		if hw, err := net.ParseMAC(n.MAC); err != nil || len(hw) != 6 {
			return fmt.Errorf("invalid MAC address %q", n.MAC)
		}
	}
	return nil
}

// validEnv rejects variables that cannot be passed on: a newline would
// end the lxc.environment line and inject configuration.
func validEnv(k, v string) error {
	if k == "" || strings.ContainsAny(k, "=\n\x00") || strings.ContainsAny(v, "\n\x00") {
		return fmt.Errorf("invalid environment variable %q", k)
	}
	return nil
}

func (d *Driver) guestDir(name string) string { return filepath.Join(d.path, name) }

// ConsoleLog is the file liblxc writes the guest's console to (1 MiB,
// then rotated to .1).
func (d *Driver) ConsoleLog(name string) string {
	return filepath.Join(d.guestDir(name), "console.log")
}

// readMetadata reads a guest's corpus.json; fs.ErrNotExist (wrapped) when
// the container is not a guest.
func (d *Driver) readMetadata(name string) (metadata, error) {
	var m metadata
	b, err := os.ReadFile(filepath.Join(d.guestDir(name), metadataFile))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("reading %s of %s: %w", metadataFile, name, err)
	}
	return m, nil
}

// openGuest opens the named guest's container; the caller releases it. It
// returns drivers.ErrNotFound unless the container is defined in the
// driver's lxcpath and carries metadata.
func (d *Driver) openGuest(name string) (*golxc.Container, metadata, error) {
	if !validName(name) {
		return nil, metadata{}, drivers.ErrNotFound
	}
	m, err := d.readMetadata(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, m, drivers.ErrNotFound
	}
	if err != nil {
		return nil, m, err
	}
	c, err := golxc.NewContainer(name, d.path)
	if err != nil {
		return nil, m, err
	}
	if !c.Defined() {
		c.Release()
		return nil, m, drivers.ErrNotFound
	}
	return c, m, nil
}

// Create makes a stopped guest from spec by cloning the image's cache,
// building the cache first when this lxcpath has none. It returns nil when
// a guest of that name and ID exists, an error wrapping drivers.ErrExists
// when one exists with another ID, and one wrapping drivers.ErrUnknownImage
// for an image the driver cannot build. A container of that name without
// metadata is a leftover of an interrupted Create and is replaced.
func (d *Driver) Create(ctx context.Context, spec drivers.GuestSpec, progress drivers.ProgressFunc) error {
	img, err := validateSpec(spec)
	if err != nil {
		return fmt.Errorf("creating container %s: %w", spec.Name, err)
	}
	built := d.built.Load()
	d.cacheMu.RLock()
	err = d.create(ctx, spec, img, progress)
	d.cacheMu.RUnlock()
	if err != nil {
		return fmt.Errorf("creating container %s: %w", spec.Name, err)
	}
	if d.built.Load() != built {
		d.collectImages(ctx, "") // the new guest keeps its image
	}
	return nil
}

func (d *Driver) create(ctx context.Context, spec drivers.GuestSpec, img imageSpec, progress drivers.ProgressFunc) error {
	m, err := d.readMetadata(spec.Name)
	switch {
	case err == nil && m.ID == spec.ID:
		return nil
	case err == nil:
		return drivers.ErrExists
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if _, err := os.Lstat(d.guestDir(spec.Name)); err == nil {
		d.log.Warn("replacing leftover container without metadata", "guest", spec.Name)
		if err := d.removeContainer(spec.Name); err != nil {
			return fmt.Errorf("removing leftover: %w", err)
		}
	}
	if img.ref {
		if img, err = d.pullImage(ctx, spec.Image, progress); err != nil {
			return err
		}
	}
	pulled, pulledCache := img.oci, img.cache
	if err := d.ensureImage(ctx, img, progress); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	var im *idmap
	if !spec.Privileged {
		if d.ids == nil {
			return errors.New("no id map for unprivileged guests on this host (see the driver's health)")
		}
		m, err := d.ids.idmap(spec.IDRange)
		if err != nil {
			return err
		}
		im = &m
		if d.clone == cloneOverlay && !d.idmapped {
			img = unprivileged(img, m)
			if err := d.ensureImage(ctx, img, progress); err != nil {
				return err
			}
		}
	}
	if err := d.cloneImage(img, spec.Name, im); err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			if err := d.removeContainer(spec.Name); err != nil {
				d.log.Warn("removing partly created container", "guest", spec.Name, "error", err)
			}
		}
	}()

	c, err := golxc.NewContainer(spec.Name, d.path)
	if err != nil {
		return err
	}
	defer c.Release()
	md := metadata{ID: spec.ID, Name: spec.Name, Image: spec.Image, Created: time.Now().UTC(), IDMap: im, Privileged: spec.Privileged, Cache: pulledCache}
	d.touchImage(pulledCache)
	if im != nil && d.clone == cloneOverlay && d.idmapped {
		md.Base = img.cache
		if err := d.stackOnImage(c, md); err != nil {
			return err
		}
	}
	if err := d.makeDisk(ctx, c, spec.Name, spec.DiskBytes, im); err != nil {
		return err
	}
	if pulled != nil {
		md.Digest, md.Command, md.Ports = pulled.Digest, pulled.Argv(spec.Command, spec.Args), pulled.Ports()
		if spec.Env, err = configureImage(&configWriter{c: c}, pulled, md.Command, filepath.Join(d.imgPath, pulledCache, "rootfs"), spec.Env); err != nil {
			return err
		}
	}
	if err := d.configure(c, spec, filepath.Join(d.guestDir(spec.Name), "lxc.log"), im); err != nil {
		return err
	}
	for _, mt := range spec.Mounts {
		md.Mounts = append(md.Mounts, mt.Source)
	}
	if err := d.shiftMounts(md); err != nil {
		return err
	}
	b, err := json.Marshal(md)
	if err != nil {
		return err
	}
	// The metadata file is written last: it is what makes the container
	// a guest.
	if err := atomicfile.Write(filepath.Join(d.guestDir(spec.Name), metadataFile), b, 0o644); err != nil {
		return err
	}
	ok = true
	d.log.Info("created guest", "guest", spec.Name, "id", spec.ID, "image", spec.Image)
	return nil
}

// cloneImage makes container name in the driver's lxcpath from img's
// cache, for a guest in the user namespace of m (nil: privileged).
func (d *Driver) cloneImage(img imageSpec, name string, m *idmap) error {
	if d.clone == cloneCopy {
		// Copied here rather than by liblxc's clone, which forks
		// without exec (see copyContainer).
		err := copyContainer(filepath.Join(d.imgPath, img.cache), d.guestDir(name), func(tmp string) error {
			if m == nil {
				return nil
			}
			// The guest's root reaches its root file system through
			// its folder, and its copy of the image's files is its own.
			if err := os.Lchown(tmp, int(m.UID), int(m.GID)); err != nil {
				return err
			}
			return d.ids.shift(filepath.Join(tmp, "rootfs"), *m)
		})
		if err != nil {
			return fmt.Errorf("cloning image %s (%s): %w", img.name, d.clone, err)
		}
		return nil
	}
	cache, err := golxc.NewContainer(img.cache, d.imgPath)
	if err != nil {
		return fmt.Errorf("opening image %s: %w", img.name, err)
	}
	defer cache.Release()
	d.rdepsMu.Lock()
	defer d.rdepsMu.Unlock()
	if err := cache.Clone(name, d.clone.options(d.path)); err != nil {
		return fmt.Errorf("cloning image %s (%s): %w", img.name, d.clone, err)
	}
	if m == nil {
		return nil
	}
	dir := d.guestDir(name)
	// The guest's root reaches its root file system through its folder.
	if err := os.Lchown(dir, int(m.UID), int(m.GID)); err != nil {
		return fmt.Errorf("cloning image %s: %w", img.name, err)
	}
	// liblxc mounts the overlay inside the guest's user namespace,
	// where its upper and work folders must be the guest's.
	for _, sub := range []string{"overlay", "overlay/delta", "overlay/work"} {
		err := os.Lchown(filepath.Join(dir, sub), int(m.UID), int(m.GID))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cloning image %s: %w", img.name, err)
		}
	}
	return nil
}

// stackOnImage mounts the guest's image (the cache m.Base with the
// guest's ids) and makes it the lower folder of the guest's overlay.
func (d *Driver) stackOnImage(c *golxc.Container, m metadata) error {
	_, upper, ok := overlayPaths(c)
	if !ok {
		return fmt.Errorf("root file system %q is not an overlay", c.ConfigItem("lxc.rootfs.path"))
	}
	if err := d.mountImage(m.Name, m.Base, *m.IDMap); err != nil {
		return err
	}
	if err := c.SetConfigItem("lxc.rootfs.path", "overlay:"+d.imageMount(m.Name)+":"+upper); err != nil {
		return fmt.Errorf("stacking the root file system on its image: %w", err)
	}
	return nil
}

// shiftMounts gives an unprivileged guest's root the host folders bound
// into it (its volume) when they still belong to the host's ids: a new
// volume, or one a privileged guest used before. A folder already in
// the map is left alone, so this is cheap on every start.
func (d *Driver) shiftMounts(m metadata) error {
	if m.IDMap == nil || len(m.Mounts) == 0 {
		return nil
	}
	if d.ids == nil {
		return fmt.Errorf("no id map on this host: %v", d.idsErr)
	}
	for _, src := range m.Mounts {
		// liblxc binds it as the guest's root, who must reach it.
		if err := searchable(filepath.Dir(src)); err != nil {
			return err
		}
		ok, err := shifted(src, *m.IDMap)
		if err != nil {
			return fmt.Errorf("checking the owner of %s: %w", src, err)
		}
		if !ok {
			if err := d.ids.shift(src, *m.IDMap); err != nil {
				return fmt.Errorf("giving %s to the guest's ids: %w", src, err)
			}
		}
	}
	return nil
}

// Start starts a created guest as a daemon: a monitor process, started
// through a short-lived helper (package forkstart), outlives the caller.
// Starting a running guest is a no-op.
func (d *Driver) Start(ctx context.Context, name string) error {
	if err := d.start(ctx, name); err != nil {
		return fmt.Errorf("starting container %s: %w", name, err)
	}
	return nil
}

func (d *Driver) start(ctx context.Context, name string) error {
	c, m, err := d.openGuest(name)
	if err != nil {
		return err
	}
	defer c.Release()
	switch c.State() {
	case golxc.RUNNING, golxc.STARTING:
		return nil
	case golxc.FROZEN:
		return c.Unfreeze()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.IDMap == nil && !m.Privileged {
		// Not moved to a range of its own (RemapIDs) first: the shared.
		if m, err = d.confineLegacy(ctx, c, m, 0); err != nil {
			return fmt.Errorf("confining a guest an older corpus made privileged: %w", err)
		}
	}
	began := time.Now()
	if err := d.shiftMounts(m); err != nil {
		return err
	}
	if err := d.mountDisk(ctx, name, m.IDMap); err != nil {
		return err
	}
	if m.Base != "" && m.IDMap != nil {
		if err := d.mountImage(name, m.Base, *m.IDMap); err != nil {
			return err
		}
	}
	if m.IDMap == nil {
		d.log.Warn("starting a privileged guest: its root is the host's root", "guest", name)
	}
	// Each start begins a fresh log, so a failure reports its own errors.
	logFile := filepath.Join(d.guestDir(name), "lxc.log")
	if err := os.Truncate(logFile, 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := startHelper(d.path, name, m.Command); err != nil {
		return fmt.Errorf("%w%s", err, logTail(logFile))
	}
	d.log.Info("started guest", "guest", name, "pid", c.InitPid(), "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// stopPoll is how often Stop looks whether a guest has shut down.
const stopPoll = 50 * time.Millisecond

// Stop asks the guest's init to halt, repeating the request every second
// (see haltResend), and waits up to timeout for it; after that, or when
// ctx ends, it kills the guest. A stopped guest is left alone.
func (d *Driver) Stop(ctx context.Context, name string, timeout time.Duration) error {
	c, _, err := d.openGuest(name)
	if err != nil {
		return fmt.Errorf("stopping container %s: %w", name, err)
	}
	defer c.Release()
	if err := d.stop(ctx, c, timeout); err != nil {
		return fmt.Errorf("stopping container %s: %w", name, err)
	}
	return nil
}

func (d *Driver) stop(ctx context.Context, c *golxc.Container, timeout time.Duration) error {
	if !c.Running() {
		return nil
	}
	if c.State() == golxc.FROZEN {
		if err := c.Unfreeze(); err != nil {
			return err
		}
	}
	if timeout > 0 && ctx.Err() == nil {
		if d.halt(ctx, c, timeout) {
			return nil
		}
		d.log.Info("guest did not halt in time, killing it", "guest", c.Name(), "timeout", timeout)
	}
	return kill(c)
}

// haltResend is how often Stop repeats the halt signal. An init that is
// still starting may not handle it yet and drop it: systemd takes
// SIGRTMIN+3 only once it has set up, and liblxc picks the signal by
// looking at what init blocks, so an early Stop sends SIGPWR, which a
// starting systemd ignores.
const haltResend = time.Second

// halt asks the guest's init to halt (lxc.signal.halt, or SIGRTMIN+3 for
// systemd) and reports whether the guest stopped within timeout.
func (d *Driver) halt(ctx context.Context, c *golxc.Container, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(stopPoll)
	defer poll.Stop()
	var last time.Time
	for c.Running() {
		if time.Since(last) >= haltResend {
			// Shutdown(0) only sends the signal; waiting here keeps ctx
			// and sub-second timeouts in our hands.
			if err := c.Shutdown(0); err != nil && c.Running() {
				d.log.Warn("sending halt signal", "guest", c.Name(), "error", err)
			}
			last = time.Now()
		}
		select {
		case <-poll.C:
		case <-deadline.C:
			return !c.Running()
		case <-ctx.Done():
			return !c.Running()
		}
	}
	return true
}

// kill stops a running container at once and waits until it is stopped.
func kill(c *golxc.Container) error {
	if err := c.Stop(); err != nil && c.Running() {
		return fmt.Errorf("killing: %w", err)
	}
	if !c.Wait(golxc.STOPPED, 10*time.Second) {
		return fmt.Errorf("killing: container still %s after 10s", c.State())
	}
	return nil
}

// Destroy kills the guest and removes its container, configuration and
// root file system. A missing guest is not an error. Destroy also removes
// a container of that name that lacks metadata, the leftover of an
// interrupted Create.
func (d *Driver) Destroy(ctx context.Context, name string) error {
	if !validName(name) {
		return nil
	}
	if err := d.removeContainer(name); err != nil {
		return fmt.Errorf("destroying container %s: %w", name, err)
	}
	return nil
}

// removeContainer kills and destroys container name in the driver's
// lxcpath, guest or not, and removes what is left of its directory.
func (d *Driver) removeContainer(name string) error {
	dir := d.guestDir(name)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	c, err := golxc.NewContainer(name, d.path)
	if err != nil {
		return err
	}
	defer c.Release()
	if c.Defined() {
		if c.Running() {
			if err := kill(c); err != nil {
				return err
			}
		}
		// Remove the metadata first: from here on the container is no
		// longer a guest, even if the destroy below fails half way.
		if err := os.Remove(filepath.Join(dir, metadataFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := d.deleteDisk(context.Background(), name); err != nil {
			return err
		}
		// An overlay's image records its dependents, and liblxc's
		// destroy updates that record. A copy is only files, removed
		// below: liblxc would remove them in a forked child, as the
		// guest's root (see copyContainer on forks).
		if _, _, overlay := overlayPaths(c); overlay {
			d.rdepsMu.Lock()
			err := c.Destroy()
			d.rdepsMu.Unlock()
			if err != nil {
				return fmt.Errorf("%w%s", err, logTail(filepath.Join(dir, "lxc.log")))
			}
		}
		d.log.Info("destroyed guest", "guest", name)
	}
	if err := d.deleteDisk(context.Background(), name); err != nil {
		return err
	}
	if err := d.unmountImage(name); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// Inspect returns the guest's state, init PID and configured limits.
func (d *Driver) Inspect(ctx context.Context, name string) (drivers.GuestStatus, error) {
	c, m, err := d.openGuest(name)
	if err != nil {
		return drivers.GuestStatus{}, fmt.Errorf("inspecting container %s: %w", name, err)
	}
	defer c.Release()
	return status(c, m), nil
}

func status(c *golxc.Container, m metadata) drivers.GuestStatus {
	st := drivers.GuestStatus{
		ID:          m.ID,
		Name:        m.Name,
		Image:       m.Image,
		ImageDigest: m.Digest,
		ImagePorts:  m.Ports,
		State:       guestState(c.State()),
	}
	if st.State != drivers.StateStopped {
		if pid := c.InitPid(); pid > 0 {
			st.PID = pid
		}
	}
	st.MemoryBytes, st.CPUMillis = configuredLimits(c)
	if v := c.ConfigItem("lxc.net.0.ipv4.address"); len(v) > 0 && v[0] != "" {
		st.Address = v[0]
	}
	return st
}

// guestState maps liblxc's states to the contract's.
func guestState(s golxc.State) drivers.State {
	switch s {
	case golxc.STOPPED:
		return drivers.StateStopped
	case golxc.STARTING:
		return drivers.StateStarting
	case golxc.RUNNING, golxc.THAWED:
		return drivers.StateRunning
	case golxc.STOPPING, golxc.ABORTING:
		return drivers.StateStopping
	case golxc.FREEZING, golxc.FROZEN:
		return drivers.StateFrozen
	}
	return drivers.StateUnknown
}

// List returns the guests in the driver's lxcpath, sorted by name. It
// reads the directory rather than liblxc's container list: a guest is a
// directory with metadata and a config file.
func (d *Driver) List(ctx context.Context) ([]drivers.GuestStatus, error) {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	var out []drivers.GuestStatus
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("listing containers: %w", err)
		}
		if !e.IsDir() || !validName(e.Name()) {
			continue
		}
		c, m, err := d.openGuest(e.Name())
		if errors.Is(err, drivers.ErrNotFound) {
			continue
		}
		if err != nil {
			d.log.Warn("skipping unreadable guest", "guest", e.Name(), "error", err)
			continue
		}
		out = append(out, status(c, m))
		c.Release()
	}
	slices.SortFunc(out, func(a, b drivers.GuestStatus) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// logTail returns the last error lines of an lxc log file, formatted to
// follow an error message, or "" when there are none.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var errs []string
	for line := range bytes.Lines(b) {
		if bytes.Contains(line, []byte(" ERROR ")) {
			errs = append(errs, strings.TrimSpace(string(line)))
		}
	}
	if len(errs) == 0 {
		return ""
	}
	if len(errs) > 3 {
		errs = errs[len(errs)-3:]
	}
	return " (" + path + ": " + strings.Join(errs, "; ") + ")"
}
