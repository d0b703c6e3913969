package volumes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/drivers"
	"corpus/internal/failpoint"
	"corpus/internal/keylock"
	"corpus/internal/names"
	"corpus/internal/revert"
	"corpus/internal/units"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/volume"
)

// Config gives a Manager what it works with.
type Config struct {
	// StateDir holds the volumes' mounts and snapshots (under volumes/).
	StateDir string
	// Backend keeps the volumes on this host; nil when they cannot run
	// here (a driver may keep them itself).
	Backend volume.Backend
	// Drivers are the node's drivers by name, Order their names as
	// configured (the first that keeps volumes itself observes them).
	Drivers map[string]drivers.Driver
	Order   []string
	// Node is this node's id and name (set once enrolled).
	Node func() (id, name string)
	// Guest is the desired guest of that id, or nil.
	Guest func(id string) *corpusv1.Guest
	// Kick wakes the reconcile loop; Report asks for a status report.
	Kick, Report func()
	Logger       *slog.Logger
}

// Manager keeps this node's volumes: each exists on the host and is
// mounted under <state>/volumes/mnt/NAME while it is present; guests get
// their volume bound in at that path. A volume bound to a guest that
// gets it as a block device (a VM) is never mounted on the host; see
// block.go. Volumes the coordinator never told about are left alone:
// data is never removed unless asked.
type Manager struct {
	cfg     Config
	backend volume.Backend
	logger  *slog.Logger

	mu         sync.Mutex
	volumes    []*corpusv1.Volume                  // this node's volumes, as last told
	observed   map[string]*corpusv1.VolumeObserved // by volume id
	busy       map[string]bool                     // volumes in transfer, by name
	oldRemoved map[string]bool                     // moved-away volumes whose copy is gone, by id
	growing    map[string]int64                    // block volumes grown while their guest runs, by name: the size before, until the guest's file system has grown
	guestSize  map[string]int64                    // block volumes' file system sizes their running guest confirmed, by name
	gate       volume.Gate                         // the resizes this node refused, by volume name
	locks      keylock.Map                         // by volume name: a host mount decided and done, or a volume handed to a VM
}

// New returns the manager of the volumes cfg describes.
func New(cfg Config) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Manager{cfg: cfg, backend: cfg.Backend, logger: cfg.Logger,
		observed: map[string]*corpusv1.VolumeObserved{}, busy: map[string]bool{}, oldRemoved: map[string]bool{},
		growing: map[string]int64{}, guestSize: map[string]int64{}}
}

// Available says whether the host keeps volumes (a backend runs here).
func (m *Manager) Available() bool { return m.backend != nil }

// Set records this node's volumes as the coordinator last told.
func (m *Manager) Set(vols []*corpusv1.Volume) {
	m.mu.Lock()
	m.volumes = vols
	m.mu.Unlock()
}

// Observed returns what the last passes observed of the volumes, and
// the moved-away volumes whose old copy is gone, for a status report.
func (m *Manager) Observed() []*corpusv1.ReportedVolume {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*corpusv1.ReportedVolume
	for id, o := range m.observed {
		out = append(out, &corpusv1.ReportedVolume{VolumeId: id, Observed: proto.Clone(o).(*corpusv1.VolumeObserved)})
	}
	for id := range m.oldRemoved {
		out = append(out, &corpusv1.ReportedVolume{VolumeId: id, OldCopyRemoved: true})
	}
	return out
}

// sizes returns the size and use last observed of each volume, by name,
// for the metrics.
func (m *Manager) sizes() []Size {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Size
	for _, v := range m.volumes {
		if o := m.observed[v.Id]; o != nil && o.SizeBytes > 0 {
			out = append(out, Size{v.Name, o.SizeBytes, o.UsedBytes})
		}
	}
	return out
}

// Size is a volume's size and use as last observed.
type Size struct {
	Name       string
	Size, Used int64
}

func (m *Manager) nodeID() string {
	id, _ := m.cfg.Node()
	return id
}

func (m *Manager) nodeName() string {
	_, name := m.cfg.Node()
	return name
}

func (m *Manager) volumeMount(name string) string {
	return filepath.Join(m.cfg.StateDir, "volumes", "mnt", name)
}

// Reconcile makes this node's volumes exist and be mounted, removes
// those being deleted, and records what it observes for the next report.
func (m *Manager) Reconcile(ctx context.Context) {
	m.mu.Lock()
	vols := append([]*corpusv1.Volume(nil), m.volumes...)
	live := map[string]bool{}
	for _, v := range vols {
		live[v.Id] = true
	}
	for id := range m.observed {
		if !live[id] {
			delete(m.observed, id)
		}
	}
	for id := range m.oldRemoved {
		if !live[id] {
			delete(m.oldRemoved, id)
		}
	}
	m.mu.Unlock()
	for _, v := range vols {
		m.mu.Lock()
		busy := m.busy[v.Name]
		m.mu.Unlock()
		if busy {
			continue // in transfer
		}
		if v.NodeId != m.nodeID() {
			m.removeOldCopy(ctx, v)
			continue
		}
		o := m.reconcileVolume(ctx, v)
		m.mu.Lock()
		prev := m.observed[v.Id]
		m.observed[v.Id] = o
		m.mu.Unlock()
		if !proto.Equal(prev, o) {
			m.cfg.Report()
		}
	}
}

func (m *Manager) reconcileVolume(ctx context.Context, v *corpusv1.Volume) *corpusv1.VolumeObserved {
	if m.backend == nil {
		for _, name := range m.cfg.Order {
			if k, ok := m.cfg.Drivers[name].(drivers.VolumeKeeper); ok {
				return keptVolume(ctx, k, v)
			}
		}
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: "volumes are not available on this node"}
	}
	if v.DesiredState == corpusv1.VolumeDeleted {
		err := m.backend.Delete(ctx, v.Name, true)
		if err != nil && !errors.Is(err, volume.ErrNotFound) {
			return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: err.Error()}
		}
		m.gate.Forget(v.Name)
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedDeleted}
	}
	if err := m.mountOnHost(ctx, v); err != nil {
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: err.Error()}
	}
	// A bound volume is resized by its guest's worker, which can stop
	// and start the guest around it; an unbound one here.
	if v.GuestId == "" {
		if err := m.resizeVolume(ctx, v, nil); err != nil {
			return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: err.Error()}
		}
	}
	info, err := m.backend.Stat(ctx, v.Name)
	if err != nil {
		return &corpusv1.VolumeObserved{State: corpusv1.ObservedFailed, Message: err.Error()}
	}
	o := &corpusv1.VolumeObserved{State: corpusv1.VolumeReady, SizeBytes: info.SizeBytes, UsedBytes: info.UsedBytes, FreeBytes: info.FreeBytes}
	if u, ok := m.guestUsage(ctx, v); ok {
		o.UsedBytes, o.FreeBytes = u.UsedBytes, u.FreeBytes
	}
	m.mu.Lock()
	before, growing := m.growing[v.Name]
	m.mu.Unlock()
	if growing {
		// The device is larger already; the guest's file system is not yet.
		o.SizeBytes, o.Message = before, fmt.Sprintf("growing to %d bytes: the guest grows its file system", v.SizeBytes)
	}
	if r, ok := m.gate.Refused(v.Name, v.SizeBytes); ok {
		o.RefusedSizeBytes, o.Message = r.Size, fmt.Sprintf("not resized to %s: %v", units.FormatSize(r.Size), r.Err)
	}
	return o
}

// mountOnHost makes volume v exist and, unless a VM may have it as its
// disk, be mounted on the host. It decides from what the agent was told
// last (v may be a pass's older copy), under the volume's lock, so a
// volume a worker is handing to a VM is never mounted behind it.
func (m *Manager) mountOnHost(ctx context.Context, v *corpusv1.Volume) error {
	defer m.lockVolume(v.Name)()
	if now := m.volumeByID(v.Id); now != nil {
		v = now
	}
	if m.hostMayMount(v) {
		_, err := m.mountVolume(ctx, v)
		return err
	}
	// A guest's disk (a VM's): made here, mounted by the guest only.
	if err := m.backend.Create(ctx, v.Name, v.SizeBytes); err != nil && !errors.Is(err, volume.ErrExists) {
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
func (m *Manager) mountVolume(ctx context.Context, v *corpusv1.Volume) (string, error) {
	if m.backend == nil {
		return "", errors.New("volumes are not available on this node")
	}
	err := m.backend.Create(ctx, v.Name, v.SizeBytes)
	if err != nil && !errors.Is(err, volume.ErrExists) {
		return "", fmt.Errorf("creating volume %s: %w", v.Name, err)
	}
	target := m.volumeMount(v.Name)
	if err := m.backend.Mount(ctx, v.Name, target); err != nil {
		return "", fmt.Errorf("mounting volume %s: %w", v.Name, err)
	}
	return target, nil
}

// GuestVolume returns the volume bound to a guest, or nil.
func (m *Manager) GuestVolume(guestID string) *corpusv1.Volume {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.volumes {
		if v.GuestId == guestID {
			return v
		}
	}
	return nil
}

// Mounts returns the volume mount of guest g, mounting it first.
func (m *Manager) Mounts(ctx context.Context, g *corpusv1.Guest) ([]drivers.Mount, error) {
	vs := g.GetSpec().GetVolume()
	if vs == nil {
		return nil, nil
	}
	v := m.GuestVolume(g.Id)
	if v == nil {
		return nil, fmt.Errorf("the volume of guest %s is not on this node yet", g.Name)
	}
	src, err := m.mountVolume(ctx, v)
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
func (m *Manager) resizeVolume(ctx context.Context, v *corpusv1.Volume, guest *guestHandle) error {
	info, err := m.backend.Stat(ctx, v.Name)
	if err != nil {
		return fmt.Errorf("measuring volume %s: %w", v.Name, err)
	}
	// A resize a crash cut short shows as file system and image sizes
	// that differ; running it again finishes it.
	if info.SizeBytes == v.SizeBytes && info.FilesystemBytes == v.SizeBytes {
		m.gate.Forget(v.Name)
		return nil
	}
	// Judged on what the volume holds now (statfs while mounted),
	// before anything is stopped for it.
	if !m.admitResize(v, info.FilesystemBytes, info.UsedBytes) {
		return nil
	}
	grow := v.SizeBytes > info.FilesystemBytes
	if grow && m.backend.Capabilities().GrowOnline {
		if err := m.backend.Grow(ctx, v.Name, v.SizeBytes); err != nil {
			return fmt.Errorf("growing volume %s: %w", v.Name, err)
		}
		m.logger.Info("volume grown online", "volume", v.Name, "size", v.SizeBytes)
		return nil
	}
	// The volume is off limits to the reconcile pass (which mounts
	// volumes) until the resize is over.
	release, err := m.volumeBusy(v.Name)
	if err != nil {
		return err
	}
	defer release()
	remount := func(ctx context.Context) error { return m.backend.Mount(ctx, v.Name, m.volumeMount(v.Name)) }
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
	if err := m.backend.Unmount(ctx, v.Name); err != nil {
		return fmt.Errorf("unmounting volume %s: %w", v.Name, err)
	}
	r.Add(func() { remount(context.Background()) })
	failpoint.Hit("volume-resize-unmounted")
	if grow {
		err = m.backend.Grow(ctx, v.Name, v.SizeBytes)
	} else if err = m.backend.Shrink(ctx, v.Name, v.SizeBytes, true); err == nil {
		_, err = m.backend.Trim(ctx, v.Name) // give the freed blocks back to the host
	}
	if errors.Is(err, volume.ErrCannotShrink) {
		// Refused offline (the file system's own minimum): the guest
		// starts again (the revert) and is not stopped for this size
		// again while the volume holds as much.
		m.refusedOffline(v, info.UsedBytes, err)
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
	m.logger.Info("volume resized", "volume", v.Name, "size", v.SizeBytes, "guest_restarted", running)
	return nil
}

// admitResize says whether volume v may go from from bytes to its
// desired size with used bytes in use now (see volume.Gate). A refusal
// is logged once and shows in the volume's observed state; the volume
// keeps its size and its guest runs on.
func (m *Manager) admitResize(v *corpusv1.Volume, from, used int64) bool {
	changed, err := m.gate.Admit(v.Name, from, v.SizeBytes, used)
	if err != nil && changed {
		m.logger.Warn("volume resize refused; the volume keeps its size", "volume", v.Name, "size", from, "desired", v.SizeBytes, "error", err)
		m.cfg.Kick() // observe and report it
	}
	return err == nil
}

// refusedOffline records a shrink the backend refused once volume v was
// offline, with used bytes in use.
func (m *Manager) refusedOffline(v *corpusv1.Volume, used int64, err error) {
	if m.gate.Refuse(v.Name, v.SizeBytes, used, err) {
		m.logger.Warn("volume shrink refused; the volume keeps its size", "volume", v.Name, "desired", v.SizeBytes, "error", err)
		m.cfg.Kick()
	}
}

// ResizeGuest makes the volume bound to guest g, which exists under
// driver d, its desired size; the guest is stopped (within timeout) and
// started again when the resize needs it offline. A guest without
// volume, or a node without volume backend, passes.
func (m *Manager) ResizeGuest(ctx context.Context, d drivers.Driver, g *corpusv1.Guest, timeout time.Duration) error {
	v := m.GuestVolume(g.Id)
	if v == nil || m.backend == nil {
		return nil
	}
	h := &guestHandle{d: d, name: g.Name, timeout: timeout}
	if d.Capabilities().Volumes == drivers.BlockVolumes {
		return m.resizeBlockVolume(ctx, v, g, h)
	}
	return m.resizeVolume(ctx, v, h)
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
func (m *Manager) removeOldCopy(ctx context.Context, v *corpusv1.Volume) {
	if m.backend == nil {
		return
	}
	if err := m.backend.Delete(ctx, v.Name, true); err != nil && !errors.Is(err, volume.ErrNotFound) {
		m.logger.Warn("removing the old copy of a moved volume", "volume", v.Name, "error", err)
		return
	}
	m.mu.Lock()
	first := !m.oldRemoved[v.Id]
	m.oldRemoved[v.Id] = true
	m.mu.Unlock()
	if first {
		m.logger.Info("removed the old copy of a moved volume", "volume", v.Name)
		m.cfg.Report()
	}
}

// Measure says what a volume of this node holds now: statfs of its file
// system where the host mounts it, the running VM's own view where one
// has it as its disk, its superblock otherwise. The coordinator admits
// a shrink on it.
func (m *Manager) Measure(ctx context.Context, name string) (*corpusv1.MeasureVolumeResponse, error) {
	if err := names.Validate("volume", name); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if m.backend == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("node %s cannot measure volumes: its driver keeps them", m.nodeName()))
	}
	var v *corpusv1.Volume
	for _, d := range m.desiredVolumes() {
		if d.Name == name && d.NodeId == m.nodeID() {
			v = d
		}
	}
	if v == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("volume %s is not on node %s", name, m.nodeName()))
	}
	info, err := m.backend.Stat(ctx, name)
	switch {
	case errors.Is(err, volume.ErrNotFound):
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("volume %s is not made on node %s yet", name, m.nodeName()))
	case err != nil:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("measuring volume %s: %w", name, err))
	}
	res := &corpusv1.MeasureVolumeResponse{SizeBytes: info.SizeBytes, UsedBytes: info.UsedBytes, FreeBytes: info.FreeBytes}
	if u, ok := m.guestUsage(ctx, v); ok {
		res.UsedBytes, res.FreeBytes = u.UsedBytes, u.FreeBytes
	}
	return res, nil
}
