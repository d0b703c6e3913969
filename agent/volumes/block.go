package volumes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"corpus/drivers"
	"corpus/internal/revert"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/volume"
)

// Block volumes: a guest whose driver has block volumes (a VM) gets its
// volume as the loop device of the volume's image, which the guest
// mounts itself. The host never mounts a volume bound to such
// a guest: two kernels mounting one ext4 file system corrupt it.
//
// Growing while the guest runs: the image and its loop device grow
// (volume.DeviceGrower), then the driver has the guest see the new size
// and grow its file system online (drivers.BlockVolumeDriver). Until the
// guest has confirmed it, the volume is reported at its old size, so
// `corpus volume enlarge` returns when the guest sees the new one.
// Growing while the guest is off, and every shrink (the guest is
// stopped for it), happen on the host, offline, as for other volumes;
// the guest grows its file system to its disk when it boots, too.

// blockGuest returns the guest bound to v and its driver when that
// driver gives volumes as block devices; nil otherwise.
func (m *Manager) blockGuest(v *corpusv1.Volume) (*corpusv1.Guest, drivers.Driver) {
	if v.GuestId == "" {
		return nil, nil
	}
	g := m.cfg.Guest(v.GuestId)
	if g == nil {
		return nil, nil
	}
	d, ok := m.cfg.Drivers[g.Spec.GetDriver()]
	if !ok || d.Capabilities().Volumes != drivers.BlockVolumes {
		return nil, nil
	}
	return g, d
}

// hostMayMount says whether the host may mount v: unbound, or bound to a
// guest that gets it as a host folder. A volume bound to a guest this
// agent does not know (yet) is left unmounted, in case its guest is a VM.
func (m *Manager) hostMayMount(v *corpusv1.Volume) bool {
	if v.GuestId == "" {
		return true
	}
	g := m.cfg.Guest(v.GuestId)
	if g == nil {
		return false
	}
	d, ok := m.cfg.Drivers[g.Spec.GetDriver()]
	return ok && d.Capabilities().Volumes == drivers.HostVolumes
}

// lockVolume serialises deciding to mount a volume on the host and
// mounting it with handing the volume to a VM; it returns the unlock.
func (m *Manager) lockVolume(name string) func() { return m.locks.Lock(name) }

// volumeByID returns this node's volume of that id as last told, or nil.
func (m *Manager) volumeByID(id string) *corpusv1.Volume {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.volumes {
		if v.Id == id {
			return v
		}
	}
	return nil
}

// BlockVolume makes the volume of guest g exist, unmounted on the
// host, with its loop device attached, and describes it for the driver.
// The volume is bound to g in what the agent was told before it is
// unmounted, under the volume's lock: a reconcile pass that decides
// afterwards sees it bound and leaves it unmounted.
func (m *Manager) BlockVolume(ctx context.Context, g *corpusv1.Guest) (drivers.BlockVolume, error) {
	v := m.GuestVolume(g.Id)
	if v == nil {
		return drivers.BlockVolume{}, fmt.Errorf("the volume of guest %s is not on this node yet", g.Name)
	}
	if m.backend == nil {
		return drivers.BlockVolume{}, errors.New("volumes are not available on this node")
	}
	defer m.lockVolume(v.Name)()
	if err := m.backend.Create(ctx, v.Name, v.SizeBytes); err != nil && !errors.Is(err, volume.ErrExists) {
		return drivers.BlockVolume{}, fmt.Errorf("creating volume %s: %w", v.Name, err)
	}
	// Unbound, the volume was mounted on the host; the guest mounts it now.
	if err := m.backend.Unmount(ctx, v.Name); err != nil {
		return drivers.BlockVolume{}, fmt.Errorf("unmounting volume %s from the host: %w", v.Name, err)
	}
	dev, err := m.backend.Attach(ctx, v.Name)
	if err != nil {
		return drivers.BlockVolume{}, fmt.Errorf("attaching volume %s: %w", v.Name, err)
	}
	return drivers.BlockVolume{Name: v.Name, Device: dev, Path: g.Spec.GetVolume().GetPath()}, nil
}

// AttachBlockVolume makes sure a guest about to start has its volume
// with the volume's current loop device (the numbers change when the
// host restarts). Guests of other drivers, or without volume, pass.
func (m *Manager) AttachBlockVolume(ctx context.Context, d drivers.Driver, g *corpusv1.Guest) error {
	if d.Capabilities().Volumes != drivers.BlockVolumes || g.Spec.GetVolume() == nil {
		return nil
	}
	bd, ok := d.(drivers.BlockVolumeDriver)
	if !ok {
		return fmt.Errorf("driver %s gives block volumes but cannot attach them: %w", d.Name(), drivers.ErrNotSupported)
	}
	bv, err := m.BlockVolume(ctx, g)
	if err != nil {
		return err
	}
	return bd.AttachVolume(ctx, g.Name, bv)
}

// resizeBlockVolume makes the volume of guest g the desired size. With
// the guest running, a grow is online (the guest grows its file system);
// a shrink stops the guest for an offline shrink on the host and starts
// it again. With the guest off, the host resizes the file system
// offline. A running guest whose file system size has not been
// confirmed since this agent started is asked once (a grow a crash cut
// short is finished so).
func (m *Manager) resizeBlockVolume(ctx context.Context, v *corpusv1.Volume, g *corpusv1.Guest, h *guestHandle) error {
	bd, ok := h.d.(drivers.BlockVolumeDriver)
	if !ok {
		return fmt.Errorf("driver %s gives block volumes but cannot grow them: %w", h.d.Name(), drivers.ErrNotSupported)
	}
	info, err := m.backend.Stat(ctx, v.Name)
	if err != nil {
		return fmt.Errorf("measuring volume %s: %w", v.Name, err)
	}
	st, err := h.d.Inspect(ctx, h.name)
	if err != nil {
		return fmt.Errorf("inspecting: %w", err)
	}
	if st.State == drivers.StateStopped {
		return m.resizeOffline(ctx, v, info)
	}
	if v.SizeBytes < info.SizeBytes {
		// Judged on what the running guest sees of its file system
		// (the host's superblock lags), before the guest is stopped.
		used := info.UsedBytes
		if u, ok := m.guestUsage(ctx, v); ok {
			used = u.UsedBytes
		}
		if !m.admitResize(v, info.SizeBytes, used) {
			return nil
		}
		return m.shrinkBlockVolume(ctx, v, h)
	}
	if v.SizeBytes != info.SizeBytes && !m.admitResize(v, info.SizeBytes, info.UsedBytes) {
		return nil // a size no backend makes
	}
	m.mu.Lock()
	confirmed := m.guestSize[v.Name] == v.SizeBytes
	m.mu.Unlock()
	if v.SizeBytes == info.SizeBytes && confirmed {
		return nil
	}
	start := time.Now()
	m.mu.Lock()
	_, pending := m.growing[v.Name]
	m.mu.Unlock()
	if v.SizeBytes > info.SizeBytes {
		pending = true
		grower, ok := m.backend.(volume.DeviceGrower)
		if !ok {
			return fmt.Errorf("growing volume %s: this node's volume backend cannot grow a device alone: %w", v.Name, drivers.ErrNotSupported)
		}
		m.mu.Lock()
		if _, ok := m.growing[v.Name]; !ok {
			m.growing[v.Name] = info.SizeBytes
		}
		m.mu.Unlock()
		if err := grower.GrowDevice(ctx, v.Name, v.SizeBytes); err != nil {
			return fmt.Errorf("growing volume %s: %w", v.Name, err)
		}
	}
	bv := drivers.BlockVolume{Name: v.Name, Device: info.Device, Path: g.Spec.GetVolume().GetPath()}
	fs, err := bd.GrowVolume(ctx, h.name, bv, v.SizeBytes)
	switch {
	case errors.Is(err, drivers.ErrNotReady), errors.Is(err, drivers.ErrNotRunning):
		// The guest boots: it grows the file system to its disk before
		// it mounts it, and is asked again on the next pass.
		return nil
	case err != nil && !pending:
		// Only a check (nothing grew): the guest had its file system
		// grown at boot. Not asked again until the volume changes.
		m.logger.Warn("checking the file system of a volume in its guest", "volume", v.Name, "guest", g.Name, "error", err)
	case err != nil:
		return err
	}
	m.mu.Lock()
	m.guestSize[v.Name] = v.SizeBytes
	delete(m.growing, v.Name)
	m.mu.Unlock()
	if pending {
		m.logger.Info("volume grown online in its guest", "volume", v.Name, "guest", g.Name, "size", v.SizeBytes, "filesystem_bytes", fs, "took", time.Since(start).Round(time.Millisecond))
		m.cfg.Kick() // report the new size
	}
	return nil
}

// resizeOffline resizes a volume no one mounts (its guest is off) on
// the host: grow, or shrink and hand the freed blocks back. A resize a
// crash cut short (file system and image sizes differ) is finished.
//
// A resize the volume's data or size rules out is refused (see
// admitResize) and resizeOffline returns nil: nothing was changed.
func (m *Manager) resizeOffline(ctx context.Context, v *corpusv1.Volume, info volume.Info) error {
	if info.SizeBytes == v.SizeBytes && info.FilesystemBytes == v.SizeBytes {
		m.gate.Forget(v.Name)
		return nil
	}
	if !m.admitResize(v, info.FilesystemBytes, info.UsedBytes) {
		return nil
	}
	var err error
	if v.SizeBytes >= info.SizeBytes {
		err = m.backend.Grow(ctx, v.Name, v.SizeBytes)
	} else if err = m.backend.Shrink(ctx, v.Name, v.SizeBytes, true); err == nil {
		_, err = m.backend.Trim(ctx, v.Name)
	}
	if errors.Is(err, volume.ErrCannotShrink) {
		m.refusedOffline(v, info.UsedBytes, err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("resizing volume %s to %d bytes: %w", v.Name, v.SizeBytes, err)
	}
	m.mu.Lock()
	delete(m.growing, v.Name)
	m.mu.Unlock()
	m.logger.Info("volume resized offline", "volume", v.Name, "size", v.SizeBytes)
	return nil
}

// shrinkBlockVolume stops the guest, shrinks its volume offline and
// starts the guest again; a failure starts the guest again too.
func (m *Manager) shrinkBlockVolume(ctx context.Context, v *corpusv1.Volume, h *guestHandle) error {
	r := revert.New()
	defer r.Fail()
	running, err := h.stop(ctx)
	if err != nil {
		return fmt.Errorf("stopping guest for the shrink of volume %s: %w", v.Name, err)
	}
	if running {
		r.Add(func() { h.start(context.Background()) })
	}
	info, err := m.backend.Stat(ctx, v.Name)
	if err != nil {
		return fmt.Errorf("measuring volume %s: %w", v.Name, err)
	}
	if err := m.resizeOffline(ctx, v, info); err != nil {
		return err
	}
	r.Success()
	if running {
		if err := h.start(ctx); err != nil {
			return fmt.Errorf("starting guest after the shrink of volume %s: %w", v.Name, err)
		}
	}
	return nil
}

// guestUsage returns what the running VM that has v as its disk sees of
// its file system: the superblock the host reads lags behind a file
// system another kernel has mounted. ok is false for other volumes and
// when the guest cannot tell (off, booting); the host's view stands then.
func (m *Manager) guestUsage(ctx context.Context, v *corpusv1.Volume) (drivers.VolumeUsage, bool) {
	g, d := m.blockGuest(v)
	if g == nil {
		return drivers.VolumeUsage{}, false
	}
	bd, ok := d.(drivers.BlockVolumeDriver)
	if !ok {
		return drivers.VolumeUsage{}, false
	}
	u, err := bd.VolumeUsage(ctx, g.Name, drivers.BlockVolume{Name: v.Name, Path: g.Spec.GetVolume().GetPath()})
	switch {
	case err == nil:
		return u, true
	case !errors.Is(err, drivers.ErrNotRunning) && !errors.Is(err, drivers.ErrNotReady) && !errors.Is(err, drivers.ErrNotFound):
		m.logger.Debug("reading a volume's use in its guest", "volume", v.Name, "guest", g.Name, "error", err)
	}
	return drivers.VolumeUsage{}, false
}
