package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/drivers"
	"corpus/internal/failpoint"
	"corpus/internal/names"
	"corpus/internal/revert"
	"corpus/internal/units"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/volume"
)

// The agent's volumes: each volume of this node exists on the host and is
// mounted under <state>/volumes/mnt/NAME while it is present; guests get
// their volume bound in at that path. A volume bound to a guest that
// gets it as a block device (a VM) is never mounted on the host; see
// blockvolumes.go. Volumes the coordinator never told
// about are left alone: data is never removed unless asked.

func (a *Agent) volumeMount(name string) string {
	return filepath.Join(a.cfg.StateDir, "volumes", "mnt", name)
}

// reconcileVolumes makes this node's volumes exist and be mounted, removes
// those being deleted, and records what it observes for the next report.
func (a *Agent) reconcileVolumes(ctx context.Context) {
	a.mu.Lock()
	vols := append([]*corpusv1.Volume(nil), a.volumes...)
	live := map[string]bool{}
	for _, v := range vols {
		live[v.Id] = true
	}
	for id := range a.volObserved {
		if !live[id] {
			delete(a.volObserved, id)
		}
	}
	for id := range a.volOldRemoved {
		if !live[id] {
			delete(a.volOldRemoved, id)
		}
	}
	a.mu.Unlock()
	for _, v := range vols {
		a.mu.Lock()
		busy := a.volBusy[v.Name]
		a.mu.Unlock()
		if busy {
			continue // in transfer
		}
		if v.NodeId != a.id.NodeID {
			a.removeOldCopy(ctx, v)
			continue
		}
		o := a.reconcileVolume(ctx, v)
		a.mu.Lock()
		prev := a.volObserved[v.Id]
		a.volObserved[v.Id] = o
		a.mu.Unlock()
		if !proto.Equal(prev, o) {
			a.poke(a.report)
		}
	}
}

func (a *Agent) reconcileVolume(ctx context.Context, v *corpusv1.Volume) *corpusv1.VolumeObserved {
	if a.vols == nil {
		for _, name := range a.cfg.Drivers {
			if k, ok := a.drivers[name].(drivers.VolumeKeeper); ok {
				return keptVolume(ctx, k, v)
			}
		}
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: "volumes are not available on this node"}
	}
	if v.DesiredState == corpusv1.VolumeDeleted {
		err := a.vols.Delete(ctx, v.Name, true)
		if err != nil && !errors.Is(err, volume.ErrNotFound) {
			return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: err.Error()}
		}
		a.volGate.Forget(v.Name)
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedDeleted}
	}
	if err := a.mountOnHost(ctx, v); err != nil {
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: err.Error()}
	}
	// A bound volume is resized by its guest's worker, which can stop
	// and start the guest around it; an unbound one here.
	if v.GuestId == "" {
		if err := a.resizeVolume(ctx, v, nil); err != nil {
			return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: err.Error()}
		}
	}
	info, err := a.vols.Stat(ctx, v.Name)
	if err != nil {
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: err.Error()}
	}
	o := &corpusv1.VolumeObserved{State: corpusv1.VolumeReady, SizeBytes: info.SizeBytes, UsedBytes: info.UsedBytes, FreeBytes: info.FreeBytes}
	if u, ok := a.guestUsage(ctx, v); ok {
		o.UsedBytes, o.FreeBytes = u.UsedBytes, u.FreeBytes
	}
	a.mu.Lock()
	before, growing := a.volGrowing[v.Name]
	a.mu.Unlock()
	if growing {
		// The device is larger already; the guest's file system is not yet.
		o.SizeBytes, o.Message = before, fmt.Sprintf("growing to %d bytes: the guest grows its file system", v.SizeBytes)
	}
	if r, ok := a.volGate.Refused(v.Name, v.SizeBytes); ok {
		o.RefusedSizeBytes, o.Message = r.Size, fmt.Sprintf("not resized to %s: %v", units.FormatSize(r.Size), r.Err)
	}
	return o
}

// mountOnHost makes volume v exist and, unless a VM may have it as its
// disk, be mounted on the host. It decides from what the agent was told
// last (v may be a pass's older copy), under the volume's lock, so a
// volume a worker is handing to a VM is never mounted behind it.
func (a *Agent) mountOnHost(ctx context.Context, v *corpusv1.Volume) error {
	defer a.lockVolume(v.Name)()
	if now := a.volumeByID(v.Id); now != nil {
		v = now
	}
	if a.hostMayMount(v) {
		_, err := a.mountVolume(ctx, v)
		return err
	}
	// A guest's disk (a VM's): made here, mounted by the guest only.
	if err := a.vols.Create(ctx, v.Name, v.SizeBytes); err != nil && !errors.Is(err, volume.ErrExists) {
		return fmt.Errorf("creating volume %s: %w", v.Name, err)
	}
	return nil
}

// keptVolume observes (or deletes) a volume a driver keeps itself; the
// driver makes it when the guest bound to it is created.
func keptVolume(ctx context.Context, k drivers.VolumeKeeper, v *corpusv1.Volume) *corpusv1.VolumeObserved {
	if v.DesiredState == corpusv1.VolumeDeleted {
		if err := k.DeleteVolume(ctx, v.Name); err != nil {
			return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: err.Error()}
		}
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedDeleted}
	}
	st, err := k.ObserveVolume(ctx, v.Name)
	switch {
	case errors.Is(err, drivers.ErrNotFound):
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedCreating, Message: "made with its guest"}
	case err != nil:
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: err.Error()}
	case !st.Ready:
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedCreating, SizeBytes: st.SizeBytes, Message: st.Message}
	}
	return &corpusv1.VolumeObserved{State: corpusv1.VolumeReady, SizeBytes: st.SizeBytes}
}

// mountVolume makes a volume exist and be mounted; it returns the mount.
func (a *Agent) mountVolume(ctx context.Context, v *corpusv1.Volume) (string, error) {
	if a.vols == nil {
		return "", errors.New("volumes are not available on this node")
	}
	err := a.vols.Create(ctx, v.Name, v.SizeBytes)
	if err != nil && !errors.Is(err, volume.ErrExists) {
		return "", fmt.Errorf("creating volume %s: %w", v.Name, err)
	}
	target := a.volumeMount(v.Name)
	if err := a.vols.Mount(ctx, v.Name, target); err != nil {
		return "", fmt.Errorf("mounting volume %s: %w", v.Name, err)
	}
	return target, nil
}

// guestVolume returns the volume bound to a guest, or nil.
func (a *Agent) guestVolume(guestID string) *corpusv1.Volume {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, v := range a.volumes {
		if v.GuestId == guestID {
			return v
		}
	}
	return nil
}

// guestMounts returns the volume mount of guest g, mounting it first.
func (a *Agent) guestMounts(ctx context.Context, g *corpusv1.Guest) ([]drivers.Mount, error) {
	vs := g.GetSpec().GetVolume()
	if vs == nil {
		return nil, nil
	}
	v := a.guestVolume(g.Id)
	if v == nil {
		return nil, fmt.Errorf("the volume of guest %s is not on this node yet", g.Name)
	}
	src, err := a.mountVolume(ctx, v)
	if err != nil {
		return nil, err
	}
	return []drivers.Mount{{Source: src, Target: vs.Path}}, nil
}

// resizeVolume makes a volume's size the desired one. Growing a mounted
// volume happens online when the backend can; otherwise, and for every
// shrink, the volume is unmounted for the resize, so stop (when not nil)
// first stops its guest, and the guest is started again afterwards. A
// failure leaves the volume mounted and the guest as it was.
func (a *Agent) resizeVolume(ctx context.Context, v *corpusv1.Volume, guest *guestHandle) error {
	info, err := a.vols.Stat(ctx, v.Name)
	if err != nil {
		return fmt.Errorf("measuring volume %s: %w", v.Name, err)
	}
	// A resize a crash cut short shows as file system and image sizes
	// that differ; running it again finishes it.
	if info.SizeBytes == v.SizeBytes && info.FilesystemBytes == v.SizeBytes {
		a.volGate.Forget(v.Name)
		return nil
	}
	// Judged on what the volume holds now (statfs while mounted),
	// before anything is stopped for it.
	if !a.admitResize(v, info.FilesystemBytes, info.UsedBytes) {
		return nil
	}
	grow := v.SizeBytes > info.FilesystemBytes
	if grow && a.vols.Capabilities().GrowOnline {
		if err := a.vols.Grow(ctx, v.Name, v.SizeBytes); err != nil {
			return fmt.Errorf("growing volume %s: %w", v.Name, err)
		}
		a.logger.Info("volume grown online", "volume", v.Name, "size", v.SizeBytes)
		return nil
	}
	// The volume is off limits to the reconcile pass (which mounts
	// volumes) until the resize is over.
	release, err := a.volumeBusy(v.Name)
	if err != nil {
		return err
	}
	defer release()
	remount := func(ctx context.Context) error { return a.vols.Mount(ctx, v.Name, a.volumeMount(v.Name)) }
	running := false
	r := revert.New()
	defer r.Fail()
	if guest != nil {
		if running, err = guest.stop(ctx); err != nil {
			return fmt.Errorf("stopping guest for the resize of volume %s: %w", v.Name, err)
		}
		if running {
			r.Add(func() { guest.start(context.Background()) })
		}
	}
	if err := a.vols.Unmount(ctx, v.Name); err != nil {
		return fmt.Errorf("unmounting volume %s: %w", v.Name, err)
	}
	r.Add(func() { remount(context.Background()) })
	failpoint.Hit("volume-resize-unmounted")
	if grow {
		err = a.vols.Grow(ctx, v.Name, v.SizeBytes)
	} else if err = a.vols.Shrink(ctx, v.Name, v.SizeBytes, true); err == nil {
		_, err = a.vols.Trim(ctx, v.Name) // give the freed blocks back to the host
	}
	if errors.Is(err, volume.ErrCannotShrink) {
		// Refused offline (the file system's own minimum): the guest
		// starts again (the revert) and is not stopped for this size
		// again while the volume holds as much.
		a.refusedOffline(v, info.UsedBytes, err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("resizing volume %s to %d bytes: %w", v.Name, v.SizeBytes, err)
	}
	failpoint.Hit("volume-resize-resized")
	r.Success()
	if err := remount(ctx); err != nil {
		return fmt.Errorf("mounting volume %s after the resize: %w", v.Name, err)
	}
	if running {
		if err := guest.start(ctx); err != nil {
			return fmt.Errorf("starting guest after the resize of volume %s: %w", v.Name, err)
		}
	}
	a.logger.Info("volume resized", "volume", v.Name, "size", v.SizeBytes, "guest_restarted", running)
	return nil
}

// admitResize says whether volume v may go from from bytes to its
// desired size with used bytes in use now (see volume.Gate). A refusal
// is logged once and shows in the volume's observed state; the volume
// keeps its size and its guest runs on.
func (a *Agent) admitResize(v *corpusv1.Volume, from, used int64) bool {
	changed, err := a.volGate.Admit(v.Name, from, v.SizeBytes, used)
	if err != nil && changed {
		a.logger.Warn("volume resize refused; the volume keeps its size", "volume", v.Name, "size", from, "desired", v.SizeBytes, "error", err)
		a.poke(a.kick) // observe and report it
	}
	return err == nil
}

// refusedOffline records a shrink the backend refused once volume v was
// offline, with used bytes in use.
func (a *Agent) refusedOffline(v *corpusv1.Volume, used int64, err error) {
	if a.volGate.Refuse(v.Name, v.SizeBytes, used, err) {
		a.logger.Warn("volume shrink refused; the volume keeps its size", "volume", v.Name, "desired", v.SizeBytes, "error", err)
		a.poke(a.kick)
	}
}

// guestHandle stops and starts one guest for work on its volume.
type guestHandle struct {
	d       drivers.Driver
	name    string
	timeout time.Duration
}

// stop stops the guest and says whether it was running.
func (h *guestHandle) stop(ctx context.Context) (bool, error) {
	st, err := h.d.Inspect(ctx, h.name)
	if errors.Is(err, drivers.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if st.State != drivers.StateRunning {
		return false, nil
	}
	return true, h.d.Stop(ctx, h.name, h.timeout)
}

func (h *guestHandle) start(ctx context.Context) error { return h.d.Start(ctx, h.name) }

// removeOldCopy deletes this node's copy of a volume that moved away, and
// says so in the next report.
func (a *Agent) removeOldCopy(ctx context.Context, v *corpusv1.Volume) {
	if a.vols == nil {
		return
	}
	if err := a.vols.Delete(ctx, v.Name, true); err != nil && !errors.Is(err, volume.ErrNotFound) {
		a.logger.Warn("removing the old copy of a moved volume", "volume", v.Name, "error", err)
		return
	}
	a.mu.Lock()
	first := !a.volOldRemoved[v.Id]
	a.volOldRemoved[v.Id] = true
	a.mu.Unlock()
	if first {
		a.logger.Info("removed the old copy of a moved volume", "volume", v.Name)
		a.poke(a.report)
	}
}

// MeasureVolume says what a volume of this node holds now: statfs of
// its file system where the host mounts it, the running VM's own view
// where one has it as its disk, its superblock otherwise. The
// coordinator admits a shrink on it.
func (s *agentAPI) MeasureVolume(ctx context.Context, req *connect.Request[corpusv1.MeasureVolumeRequest]) (*connect.Response[corpusv1.MeasureVolumeResponse], error) {
	a := s.a
	if err := a.checkCaller(req.Header()); err != nil {
		return nil, err
	}
	name := req.Msg.Name
	if err := names.Validate("volume", name); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if a.vols == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("node %s cannot measure volumes: its driver keeps them", a.id.NodeName))
	}
	var v *corpusv1.Volume
	for _, d := range a.desiredVolumes() {
		if d.Name == name && d.NodeId == a.id.NodeID {
			v = d
		}
	}
	if v == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("volume %s is not on node %s", name, a.id.NodeName))
	}
	info, err := a.vols.Stat(ctx, name)
	switch {
	case errors.Is(err, volume.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("volume %s is not made on node %s yet", name, a.id.NodeName))
	case err != nil:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("measuring volume %s: %w", name, err))
	}
	res := &corpusv1.MeasureVolumeResponse{SizeBytes: info.SizeBytes, UsedBytes: info.UsedBytes, FreeBytes: info.FreeBytes}
	if u, ok := a.guestUsage(ctx, v); ok {
		res.UsedBytes, res.FreeBytes = u.UsedBytes, u.FreeBytes
	}
	return connect.NewResponse(res), nil
}
