package loop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"corpus/internal/failpoint"
	"corpus/internal/revert"
	"corpus/volume"
)

// New returns a Backend over cfg.Root, creating the folder if missing. It
// needs root and /dev/loop-control for everything but Stat and List.
func New(cfg Config) (*Backend, error) {
	b, err := newBackend(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(b.root, 0o700); err != nil {
		return nil, fmt.Errorf("making volume root: %w", err)
	}
	b.growOnline = canResizeOnline()
	if !b.growOnline {
		b.log.Warn("no CAP_SYS_RESOURCE: mounted volumes cannot grow online")
	}
	return b, nil
}

// state is what the host says about one volume now.
type state struct {
	image  string
	id     fileID
	size   int64 // image size
	alloc  int64 // host bytes
	loops  []string
	mounts []string // mount points of loops[0]
}

func (s *state) attached() bool { return len(s.loops) > 0 }
func (s *state) mounted() bool  { return len(s.mounts) > 0 }

// device is the first loop device, or "".
func (s *state) device() string {
	if len(s.loops) == 0 {
		return ""
	}
	return s.loops[0]
}

// fsTarget is what the ext4 tools should work on: the loop device when
// attached (so they share its page cache with the kernel), else the image.
func (s *state) fsTarget() string {
	if d := s.device(); d != "" {
		return d
	}
	return s.image
}

// inspect reads the state of volume name; ErrNotFound when its image is
// missing.
func (b *Backend) inspect(name string) (*state, error) {
	image, err := b.ImagePath(name)
	if err != nil {
		return nil, err
	}
	id, st, err := statID(image)
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("%w: %s", volume.ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading image of %s: %w", name, err)
	}
	s := &state{image: image, id: id, size: st.Size, alloc: st.Blocks * 512}
	if s.loops, err = loopsFor(id); err != nil {
		return nil, err
	}
	for _, l := range s.loops {
		m, err := mountsOf(l)
		if err != nil {
			return nil, err
		}
		s.mounts = append(s.mounts, m...)
	}
	return s, nil
}

// superblockOf reads the file-system superblock through the device when
// attached (it sees what a mounted kernel wrote), else from the image.
func superblockOf(s *state) (superblock, error) {
	f, err := os.Open(s.fsTarget())
	if err != nil {
		return superblock{}, err
	}
	defer f.Close()
	return readSuperblock(f)
}

// Create makes volume name: a sparse image of size bytes (a size
// volume.CheckSize takes; it is not rounded) with an ext4 file system
// labelled with the name (cut to 16 bytes). The image appears under its
// final name only when complete, so an interrupted Create leaves
// nothing. An existing volume of the same size is success; of another
// size, volume.ErrExists.
func (b *Backend) Create(ctx context.Context, name string, size int64) error {
	image, err := b.ImagePath(name)
	if err != nil {
		return err
	}
	defer b.lock(name)()
	if st, err := os.Stat(image); err == nil {
		if st.Size() != size {
			return fmt.Errorf("%w: %s has %d bytes, asked for %d", volume.ErrExists, name, st.Size(), size)
		}
		return nil
	}
	if err := volume.CheckSize(size); err != nil {
		return err
	}

	r := revert.New()
	defer r.Fail()
	f, err := os.CreateTemp(b.root, tempPrefix+name+"-*")
	if err != nil {
		return fmt.Errorf("creating image of %s: %w", name, err)
	}
	tmp := f.Name()
	r.Add(func() { os.Remove(tmp) })
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sizing image of %s: %w", name, err)
	}
	// Inode tables are zeroed now (by punching holes in the sparse
	// image, which costs nothing), so no lazy-init thread writes them
	// later; the journal of a fresh sparse file is zeros already.
	if _, err := b.run(ctx, "mkfs.ext4", "-F", "-q", "-b", "4096", "-m", "0", "-L", label(name),
		"-E", "lazy_itable_init=0,lazy_journal_init=1", tmp); err != nil {
		return fmt.Errorf("making file system of %s: %w", name, err)
	}
	if err := syncFile(tmp); err != nil {
		return fmt.Errorf("syncing image of %s: %w", name, err)
	}
	if err := os.Rename(tmp, image); err != nil {
		return fmt.Errorf("naming image of %s: %w", name, err)
	}
	if err := syncFile(b.root); err != nil {
		return fmt.Errorf("syncing volume root: %w", err)
	}
	r.Success()
	b.log.Info("volume created", "volume", name, "size", size)
	return nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Attach returns the loop device of volume name, binding a free one when
// none is bound to its image yet.
func (b *Backend) Attach(ctx context.Context, name string) (string, error) {
	defer b.lock(name)()
	s, err := b.inspect(name)
	if err != nil {
		return "", err
	}
	return b.attach(name, s)
}

func (b *Backend) attach(name string, s *state) (string, error) {
	if s.attached() {
		return s.device(), nil
	}
	dev, err := attachLoop(s.image)
	if err != nil {
		return "", fmt.Errorf("attaching %s: %w", name, err)
	}
	s.loops = []string{dev}
	b.log.Info("volume attached", "volume", name, "device", dev)
	return dev, nil
}

// Detach unbinds every loop device of volume name; volume.ErrInUse when
// it is mounted.
func (b *Backend) Detach(ctx context.Context, name string) error {
	defer b.lock(name)()
	s, err := b.inspect(name)
	if err != nil {
		return err
	}
	if s.mounted() {
		return fmt.Errorf("%w: %s is mounted at %s", volume.ErrInUse, name, s.mounts[0])
	}
	return b.detach(name, s)
}

func (b *Backend) detach(name string, s *state) error {
	for _, l := range s.loops {
		if err := detachLoop(l); err != nil {
			return err
		}
		b.log.Info("volume detached", "volume", name, "device", l)
	}
	s.loops = nil
	return nil
}

// Mount attaches volume name if needed and mounts its file system at
// target (absolute; made 0755 if missing) with noatime and without online
// discard. Mounted at target already is success; mounted elsewhere is
// volume.ErrInUse. A failed Mount detaches a device it attached.
func (b *Backend) Mount(ctx context.Context, name, target string) error {
	if !filepath.IsAbs(target) {
		return fmt.Errorf("%w: mount target %q is not absolute", volume.ErrInvalid, target)
	}
	target = filepath.Clean(target)
	defer b.lock(name)()
	s, err := b.inspect(name)
	if err != nil {
		return err
	}
	if s.mounted() {
		if slices.Contains(s.mounts, target) {
			return nil
		}
		return fmt.Errorf("%w: %s is mounted at %s", volume.ErrInUse, name, s.mounts[0])
	}
	return b.mount(name, s, target)
}

func (b *Backend) mount(name string, s *state, target string) error {
	r := revert.New()
	defer r.Fail()
	if !s.attached() {
		if _, err := b.attach(name, s); err != nil {
			return err
		}
		r.Add(func() {
			if err := b.detach(name, s); err != nil {
				b.log.Warn("undoing attach", "volume", name, "err", err)
			}
		})
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("making mount point of %s: %w", name, err)
	}
	dev := s.device()
	if err := mountPrivate(dev, target, unix.MS_NOATIME|unix.MS_NODEV|unix.MS_NOSUID, "nodiscard"); err != nil {
		return fmt.Errorf("mounting %s at %s: %w", name, target, err)
	}
	s.mounts = []string{target}
	r.Success()
	b.log.Info("volume mounted", "volume", name, "device", dev, "target", target)
	return nil
}

// Unmount unmounts volume name from every mount point; the device stays
// attached. A busy mount point is volume.ErrInUse.
func (b *Backend) Unmount(ctx context.Context, name string) error {
	defer b.lock(name)()
	s, err := b.inspect(name)
	if err != nil {
		return err
	}
	return b.unmount(name, s)
}

func (b *Backend) unmount(name string, s *state) error {
	for i := len(s.mounts) - 1; i >= 0; i-- {
		if err := unmountBusyRetry(s.mounts[i]); err != nil && !errors.Is(err, unix.EINVAL) {
			if errors.Is(err, unix.EBUSY) {
				err = fmt.Errorf("%w: %w", volume.ErrInUse, err)
			}
			return fmt.Errorf("unmounting %s from %s: %w", name, s.mounts[i], err)
		}
		if err := unmountPrivateBind(s.mounts[i]); err != nil {
			return fmt.Errorf("unmounting %s: %w", name, err)
		}
		b.log.Info("volume unmounted", "volume", name, "target", s.mounts[i])
	}
	if len(s.mounts) > 0 {
		s.mounts = nil
		for _, l := range s.loops {
			if err := waitIdle(l); err != nil {
				return fmt.Errorf("unmounting %s: %w", name, err)
			}
		}
	}
	return nil
}

// resizeImage sets the image's size and makes its loop devices see it.
func resizeImage(s *state, size int64) error {
	if err := os.Truncate(s.image, size); err != nil {
		return fmt.Errorf("resizing image: %w", err)
	}
	for _, l := range s.loops {
		if err := setCapacity(l); err != nil {
			return err
		}
	}
	s.size = size
	return nil
}

// Grow enlarges volume name and its file system to size, online when
// mounted: the file system shows the new size when Grow returns. Online
// growth needs Capabilities().GrowOnline; without it Grow of a mounted
// volume returns volume.ErrNotSupported, nothing changed. A size
// below the current one is volume.ErrInvalid. Growing to the current size
// finishes an interrupted grow (the file system catches up with the image).
func (b *Backend) Grow(ctx context.Context, name string, size int64) error {
	if err := volume.ValidateName(name); err != nil {
		return err
	}
	if err := volume.CheckSize(size); err != nil {
		return err
	}
	defer b.lock(name)()
	s, err := b.inspect(name)
	if err != nil {
		return err
	}
	if size < s.size {
		return fmt.Errorf("%w: growing %s to %d bytes, below its %d (use Shrink)", volume.ErrInvalid, name, size, s.size)
	}
	sb, err := superblockOf(s)
	if err != nil {
		return fmt.Errorf("growing %s: %w", name, err)
	}
	if size == s.size && sb.size() == size {
		return nil
	}
	if s.mounted() && !b.growOnline {
		return fmt.Errorf("%w: growing %s while mounted needs CAP_SYS_RESOURCE, which this process lacks; unmount it first", volume.ErrNotSupported, name)
	}

	r := revert.New()
	defer r.Fail()
	old := s.size
	if err := resizeImage(s, size); err != nil {
		return fmt.Errorf("growing %s: %w", name, err)
	}
	r.Add(func() {
		// Give the space back only while the file system has not
		// started to use it.
		if sb, err := superblockOf(s); err == nil && sb.size() <= old {
			if err := resizeImage(s, old); err != nil {
				b.log.Warn("undoing image grow", "volume", name, "err", err)
			}
		}
	})
	if !s.mounted() {
		if s.attached() {
			if err := waitIdle(s.device()); err != nil {
				return fmt.Errorf("growing %s: %w", name, err)
			}
		}
		// resize2fs wants a freshly checked file system offline.
		if err := b.fsck(ctx, s.fsTarget(), "-p"); err != nil {
			return fmt.Errorf("growing %s: %w", name, err)
		}
	}
	failpoint.Hit("volume-grow-image-grown")
	if _, err := b.run(ctx, "resize2fs", s.fsTarget(), fmt.Sprintf("%dK", size/1024)); err != nil {
		return fmt.Errorf("growing file system of %s: %w", name, err)
	}
	r.Success()
	b.log.Info("volume grown", "volume", name, "from", old, "to", size, "online", s.mounted())
	return nil
}

var _ volume.DeviceGrower = (*Backend)(nil)

// GrowDevice enlarges volume name's image to size and makes its loop
// devices see it (LOOP_SET_CAPACITY), leaving the file system as it is:
// a VM that has the device as its disk grows the file system itself.
// A size below the current one is volume.ErrInvalid; the current size
// changes nothing.
func (b *Backend) GrowDevice(ctx context.Context, name string, size int64) error {
	if err := volume.ValidateName(name); err != nil {
		return err
	}
	if err := volume.CheckSize(size); err != nil {
		return err
	}
	defer b.lock(name)()
	s, err := b.inspect(name)
	if err != nil {
		return err
	}
	switch {
	case size < s.size:
		return fmt.Errorf("%w: growing %s to %d bytes, below its %d", volume.ErrInvalid, name, size, s.size)
	case size == s.size:
		return nil
	}
	old := s.size
	if err := resizeImage(s, size); err != nil {
		return fmt.Errorf("growing %s: %w", name, err)
	}
	b.log.Info("volume device grown", "volume", name, "from", old, "to", size)
	return nil
}

// Shrink reduces volume name to size. It returns volume.ErrCannotShrink,
// with nothing changed, unless allowShrink is true and the used bytes plus
// volume.ShrinkMargin fit in size (resize2fs's own minimum is checked as
// well); then volume.ErrInUse when mounted. It checks the file system
// (e2fsck -f -y), shrinks it, then the image. Shrinking to the current
// size finishes an interrupted shrink.
func (b *Backend) Shrink(ctx context.Context, name string, size int64, allowShrink bool) error {
	if err := volume.ValidateName(name); err != nil {
		return err
	}
	if err := volume.CheckSize(size); err != nil {
		return err
	}
	defer b.lock(name)()
	s, err := b.inspect(name)
	if err != nil {
		return err
	}
	if size > s.size {
		return fmt.Errorf("%w: shrinking %s to %d bytes, above its %d (use Grow)", volume.ErrInvalid, name, size, s.size)
	}
	info, err := b.stat(name, s)
	if err != nil {
		return err
	}
	if size == s.size && info.FilesystemBytes == size {
		return nil
	}
	if err := volume.CheckShrink(info.UsedBytes, size, allowShrink); err != nil {
		return fmt.Errorf("shrinking %s: %w", name, err)
	}
	if s.mounted() {
		return fmt.Errorf("%w: shrinking %s needs it unmounted; it is mounted at %s", volume.ErrInUse, name, s.mounts[0])
	}
	target := s.fsTarget()
	if s.attached() {
		if err := waitIdle(target); err != nil {
			return fmt.Errorf("shrinking %s: %w", name, err)
		}
	}
	if err := b.fsck(ctx, target, "-y"); err != nil {
		return fmt.Errorf("shrinking %s: %w", name, err)
	}
	if out, err := b.run(ctx, "resize2fs", target, fmt.Sprintf("%dK", size/1024)); err != nil {
		if strings.Contains(out, "smaller than minimum") {
			return fmt.Errorf("shrinking %s: %w: resize2fs: %s", name, volume.ErrCannotShrink, lastLine(out))
		}
		return fmt.Errorf("shrinking file system of %s: %w", name, err)
	}
	// The file system ends before the new end of the image now; a crash
	// from here leaves a larger image, which the next Shrink trims.
	failpoint.Hit("volume-shrink-fs-shrunk")
	old := s.size
	if err := resizeImage(s, size); err != nil {
		return fmt.Errorf("shrinking %s: %w", name, err)
	}
	b.log.Info("volume shrunk", "volume", name, "from", old, "to", size)
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// fitrim is FITRIM, _IOWR('X', 121, struct fstrim_range).
const fitrim = 0xc0185879

type fstrimRange struct{ start, len, minLen uint64 }

// Trim discards the unused blocks of volume name's file system, which
// punches them out of the sparse image, and returns the bytes the file
// system trimmed. An unmounted volume is mounted for the trim under the
// root's private folder and put back as it was.
func (b *Backend) Trim(ctx context.Context, name string) (int64, error) {
	defer b.lock(name)()
	s, err := b.inspect(name)
	if err != nil {
		return 0, err
	}
	r := revert.New()
	defer r.Fail()
	if !s.mounted() {
		wasAttached := s.attached()
		tmp, err := os.MkdirTemp(b.root, tempPrefix+"trim-"+name+"-")
		if err != nil {
			return 0, fmt.Errorf("trimming %s: %w", name, err)
		}
		defer os.Remove(tmp)
		if err := b.mount(name, s, tmp); err != nil {
			return 0, fmt.Errorf("trimming %s: %w", name, err)
		}
		defer func() {
			if err := b.unmount(name, s); err != nil {
				b.log.Warn("unmounting after trim", "volume", name, "err", err)
				return
			}
			if !wasAttached {
				if err := b.detach(name, s); err != nil {
					b.log.Warn("detaching after trim", "volume", name, "err", err)
				}
			}
		}()
	}
	d, err := os.Open(s.mounts[0])
	if err != nil {
		return 0, fmt.Errorf("trimming %s: %w", name, err)
	}
	defer d.Close()
	rg := fstrimRange{len: ^uint64(0)}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, d.Fd(), fitrim, uintptr(unsafe.Pointer(&rg))); errno != 0 {
		return 0, fmt.Errorf("trimming %s: %w", name, errno)
	}
	r.Success()
	b.log.Info("volume trimmed", "volume", name, "trimmed", rg.len)
	return int64(rg.len), nil
}

// Stat describes volume name; volume.ErrNotFound when it does not exist.
func (b *Backend) Stat(ctx context.Context, name string) (volume.Info, error) {
	if err := volume.ValidateName(name); err != nil {
		return volume.Info{}, err
	}
	defer b.lock(name)()
	s, err := b.inspect(name)
	if err != nil {
		return volume.Info{}, err
	}
	return b.stat(name, s)
}

func (b *Backend) stat(name string, s *state) (volume.Info, error) {
	info := volume.Info{
		Name:      name,
		SizeBytes: s.size,
		Allocated: s.alloc,
		Device:    s.device(),
		Attached:  s.attached(),
		Mounted:   s.mounted(),
	}
	if s.mounted() {
		info.MountPoint = s.mounts[0]
	}
	sb, err := superblockOf(s)
	if err != nil {
		return info, fmt.Errorf("reading %s: %w", name, err)
	}
	info.FilesystemBytes = sb.size()
	info.UsedBytes, info.FreeBytes = sb.used(), sb.free()
	if s.mounted() {
		var fs unix.Statfs_t
		if err := unix.Statfs(info.MountPoint, &fs); err != nil {
			return info, fmt.Errorf("reading %s: %w", name, err)
		}
		info.UsedBytes = int64(fs.Blocks-fs.Bfree) * fs.Bsize
		info.FreeBytes = int64(fs.Bavail) * fs.Bsize
	}
	return info, nil
}

// List describes every volume under the root, sorted by name.
func (b *Backend) List(ctx context.Context) ([]volume.Info, error) {
	entries, err := os.ReadDir(b.root)
	if err != nil {
		return nil, fmt.Errorf("listing volumes: %w", err)
	}
	var out []volume.Info
	for _, e := range entries {
		name, ok := volumeName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		info, err := b.Stat(ctx, name)
		if errors.Is(err, volume.ErrNotFound) { // deleted meanwhile
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// Delete removes volume name and its data. A mounted or attached volume
// is volume.ErrInUse unless force, which unmounts and detaches it first.
func (b *Backend) Delete(ctx context.Context, name string, force bool) error {
	defer b.lock(name)()
	s, err := b.inspect(name)
	if err != nil {
		return err
	}
	if s.mounted() || s.attached() {
		if !force {
			return fmt.Errorf("%w: %s is attached to %s (mounted: %v)", volume.ErrInUse, name, s.device(), s.mounted())
		}
		if err := b.unmount(name, s); err != nil {
			return err
		}
		if err := b.detach(name, s); err != nil {
			return err
		}
	}
	if err := os.Remove(s.image); err != nil {
		return fmt.Errorf("deleting %s: %w", name, err)
	}
	b.log.Info("volume deleted", "volume", name)
	return nil
}
