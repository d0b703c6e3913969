package agent

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
func (a *Agent) blockGuest(v *corpusv1.Volume) (*corpusv1.Guest, drivers.Driver) {
	if v.GuestId == "" {
		return nil, nil
	}
	a.mu.Lock()
	g := a.desired[v.GuestId]
	a.mu.Unlock()
	if g == nil {
		return nil, nil
	}
	d, ok := a.drivers[g.Spec.GetDriver()]
	if !ok || d.Capabilities().Volumes != drivers.BlockVolumes {
		return nil, nil
	}
	return g, d
}

// hostMayMount says whether the host may mount v: unbound, or bound to a
// guest that gets it as a host folder. A volume bound to a guest this
// agent does not know (yet) is left unmounted, in case its guest is a VM.
func (a *Agent) hostMayMount(v *corpusv1.Volume) bool {
	if v.GuestId == "" {
		return true
	}
	a.mu.Lock()
	g := a.desired[v.GuestId]
	a.mu.Unlock()
	if g == nil {
		return false
	}
	d, ok := a.drivers[g.Spec.GetDriver()]
	return ok && d.Capabilities().Volumes == drivers.HostVolumes
}

// lockVolume serialises deciding to mount a volume on the host and
// mounting it with handing the volume to a VM; it returns the unlock.
func (a *Agent) lockVolume(name string) func() { return a.volLocks.Lock(name) }

// volumeByID returns this node's volume of that id as last told, or nil.
func (a *Agent) volumeByID(id string) *corpusv1.Volume {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, v := range a.volumes {
		if v.Id == id {
			return v
		}
	}
	return nil
}

// guestBlockVolume makes the volume of guest g exist, unmounted on the
// host, with its loop device attached, and describes it for the driver.
// The volume is bound to g in what the agent was told before it is
// unmounted, under the volume's lock: a reconcile pass that decides
// afterwards sees it bound and leaves it unmounted.
func (a *Agent) guestBlockVolume(ctx context.Context, g *corpusv1.Guest) (drivers.BlockVolume, error) {
	v := a.guestVolume(g.Id)
	if v == nil {
		return drivers.BlockVolume{}, fmt.Errorf("the volume of guest %s is not on this node yet", g.Name)
	}
	if a.vols == nil {
		return drivers.BlockVolume{}, errors.New("volumes are not available on this node")
	}
	defer a.lockVolume(v.Name)()
	if err := a.vols.Create(ctx, v.Name, v.SizeBytes); err != nil && !errors.Is(err, volume.ErrExists) {
		return drivers.BlockVolume{}, fmt.Errorf("creating volume %s: %w", v.Name, err)
	}
	// Unbound, the volume was mounted on the host; the guest mounts it now.
	if err := a.vols.Unmount(ctx, v.Name); err != nil {
		return drivers.BlockVolume{}, fmt.Errorf("unmounting volume %s from the host: %w", v.Name, err)
	}
	dev, err := a.vols.Attach(ctx, v.Name)
	if err != nil {
		return drivers.BlockVolume{}, fmt.Errorf("attaching volume %s: %w", v.Name, err)
	}
	return drivers.BlockVolume{Name: v.Name, Device: dev, Path: g.Spec.GetVolume().GetPath()}, nil
}

// attachBlockVolume makes sure a guest about to start has its volume
// with the volume's current loop device (the numbers change when the
// host restarts). Guests of other drivers, or without volume, pass.
func (a *Agent) attachBlockVolume(ctx context.Context, d drivers.Driver, g *corpusv1.Guest) error {
	if d.Capabilities().Volumes != drivers.BlockVolumes || g.Spec.GetVolume() == nil {
		return nil
	}
	bd, ok := d.(drivers.BlockVolumeDriver)
	if !ok {
		return fmt.Errorf("driver %s gives block volumes but cannot attach them: %w", d.Name(), drivers.ErrNotSupported)
	}
	bv, err := a.guestBlockVolume(ctx, g)
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
func (a *Agent) resizeBlockVolume(ctx context.Context, v *corpusv1.Volume, g *corpusv1.Guest, h *guestHandle) error {
	bd, ok := h.d.(drivers.BlockVolumeDriver)
	if !ok {
		return fmt.Errorf("driver %s gives block volumes but cannot grow them: %w", h.d.Name(), drivers.ErrNotSupported)
	}
	info, err := a.vols.Stat(ctx, v.Name)
	if err != nil {
		return fmt.Errorf("measuring volume %s: %w", v.Name, err)
	}
	st, err := h.d.Inspect(ctx, h.name)
	if err != nil {
		return fmt.Errorf("inspecting: %w", err)
	}
	if st.State == drivers.StateStopped {
		return a.resizeOffline(ctx, v, info)
	}
	if v.SizeBytes < info.SizeBytes {
		// Judged on what the running guest sees of its file system
		// (the host's superblock lags), before the guest is stopped.
		used := info.UsedBytes
		if u, ok := a.guestUsage(ctx, v); ok {
			used = u.UsedBytes
		}
		if !a.admitResize(v, info.SizeBytes, used) {
			return nil
		}
		return a.shrinkBlockVolume(ctx, v, h)
	}
	if v.SizeBytes != info.SizeBytes && !a.admitResize(v, info.SizeBytes, info.UsedBytes) {
		return nil // a size no backend makes
	}
	a.mu.Lock()
	confirmed := a.volGuestSize[v.Name] == v.SizeBytes
	a.mu.Unlock()
	if v.SizeBytes == info.SizeBytes && confirmed {
		return nil
	}
	start := time.Now()
	a.mu.Lock()
	_, pending := a.volGrowing[v.Name]
	a.mu.Unlock()
	if v.SizeBytes > info.SizeBytes {
		pending = true
		grower, ok := a.vols.(volume.DeviceGrower)
		if !ok {
			return fmt.Errorf("growing volume %s: this node's volume backend cannot grow a device alone: %w", v.Name, drivers.ErrNotSupported)
		}
		a.mu.Lock()
		if _, ok := a.volGrowing[v.Name]; !ok {
			a.volGrowing[v.Name] = info.SizeBytes
		}
		a.mu.Unlock()
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
		a.logger.Warn("checking the file system of a volume in its guest", "volume", v.Name, "guest", g.Name, "error", err)
	case err != nil:
		return err
	}
	a.mu.Lock()
	a.volGuestSize[v.Name] = v.SizeBytes
	delete(a.volGrowing, v.Name)
	a.mu.Unlock()
	if pending {
		a.logger.Info("volume grown online in its guest", "volume", v.Name, "guest", g.Name, "size", v.SizeBytes, "filesystem_bytes", fs, "took", time.Since(start).Round(time.Millisecond))
		a.poke(a.kick) // report the new size
	}
	return nil
}

// resizeOffline resizes a volume no one mounts (its guest is off) on
// the host: grow, or shrink and hand the freed blocks back. A resize a
// crash cut short (file system and image sizes differ) is finished.
//
// A resize the volume's data or size rules out is refused (see
// admitResize) and resizeOffline returns nil: nothing was changed.
func (a *Agent) resizeOffline(ctx context.Context, v *corpusv1.Volume, info volume.Info) error {
	if info.SizeBytes == v.SizeBytes && info.FilesystemBytes == v.SizeBytes {
		a.volGate.Forget(v.Name)
		return nil
	}
	if !a.admitResize(v, info.FilesystemBytes, info.UsedBytes) {
		return nil
	}
	var err error
	if v.SizeBytes >= info.SizeBytes {
		err = a.vols.Grow(ctx, v.Name, v.SizeBytes)
	} else if err = a.vols.Shrink(ctx, v.Name, v.SizeBytes, true); err == nil {
		_, err = a.vols.Trim(ctx, v.Name)
	}
	if errors.Is(err, volume.ErrCannotShrink) {
		a.refusedOffline(v, info.UsedBytes, err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("resizing volume %s to %d bytes: %w", v.Name, v.SizeBytes, err)
	}
	a.mu.Lock()
	delete(a.volGrowing, v.Name)
	a.mu.Unlock()
	a.logger.Info("volume resized offline", "volume", v.Name, "size", v.SizeBytes)
	return nil
}

// shrinkBlockVolume stops the guest, shrinks its volume offline and
// starts the guest again; a failure starts the guest again too.
func (a *Agent) shrinkBlockVolume(ctx context.Context, v *corpusv1.Volume, h *guestHandle) error {
	r := revert.New()
	defer r.Fail()
	running, err := h.stop(ctx)
	if err != nil {
		return fmt.Errorf("stopping guest for the shrink of volume %s: %w", v.Name, err)
	}
	if running {
		r.Add(func() { h.start(context.Background()) })
	}
	info, err := a.vols.Stat(ctx, v.Name)
	if err != nil {
		return fmt.Errorf("measuring volume %s: %w", v.Name, err)
	}
	if err := a.resizeOffline(ctx, v, info); err != nil {
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
func (a *Agent) guestUsage(ctx context.Context, v *corpusv1.Volume) (drivers.VolumeUsage, bool) {
	g, d := a.blockGuest(v)
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
		a.logger.Debug("reading a volume's use in its guest", "volume", v.Name, "guest", g.Name, "error", err)
	}
	return drivers.VolumeUsage{}, false
}
