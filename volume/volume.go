package volume

import (
	"context"
	"fmt"
	"io"

	"corpus/internal/names"
	"corpus/internal/units"
)

// Size limits every backend enforces.
const (
	MiB = int64(1) << 20
	GiB = int64(1) << 30
	TiB = int64(1) << 40

	// MinSize is the smallest volume: an ext4 file system with a journal
	// and room for data.
	MinSize = 32 * MiB
	// MaxSize is the largest volume; anything above it is taken for a typo.
	MaxSize = 64 * TiB
	// Align is the granule of volume sizes (the file system's block):
	// every size is a multiple of it (see NormalizeSize).
	Align = 4096

	// minMargin is the least free space a shrink must leave.
	minMargin = 64 * MiB
)

// Capabilities says what a backend can do. Callers check it instead of the
// backend's name.
type Capabilities struct {
	// GrowOnline: Grow works while the volume is mounted and in use.
	GrowOnline bool
	// ShrinkOffline: Shrink works while the volume is not mounted.
	ShrinkOffline bool
	// Snapshot: the backend can take point-in-time snapshots.
	Snapshot bool
	// Discard: Trim hands unused blocks back to the host.
	Discard bool
}

// Info describes one volume as it is on the host now.
type Info struct {
	Name string
	// SizeBytes is the provisioned size (the image or device size).
	SizeBytes int64
	// FilesystemBytes is the size the file system says it has; it differs
	// from SizeBytes only while a grow or shrink is half done.
	FilesystemBytes int64
	// UsedBytes and FreeBytes are what df shows inside the volume (from
	// statfs when mounted, from the superblock otherwise).
	UsedBytes int64
	FreeBytes int64
	// Allocated is the host storage the volume really takes (a sparse image
	// takes less than SizeBytes).
	Allocated int64
	// Device is the block device, such as /dev/loop3, when attached.
	Device string
	// MountPoint is where the volume is mounted in the caller's mount
	// namespace, when mounted.
	MountPoint string
	Attached   bool
	Mounted    bool
}

// Backend manages the volumes of one node. Implementations are safe for
// concurrent use; operations on one volume are serialized, operations on
// different volumes run in parallel. All sizes are bytes, sizes
// CheckSize takes (a backend refuses others rather than round them).
type Backend interface {
	// Capabilities reports what the backend can do.
	Capabilities() Capabilities
	// Create makes an empty volume with a file system labelled with its
	// name. Creating an existing volume of the same size succeeds; of
	// another size it returns ErrExists.
	Create(ctx context.Context, name string, size int64) error
	// Attach makes the volume's block device and returns its path. It
	// finds a device already attached (by an earlier agent) instead of
	// making a second one.
	Attach(ctx context.Context, name string) (device string, err error)
	// Detach removes the block device; ErrInUse when mounted. Detaching a
	// detached volume succeeds.
	Detach(ctx context.Context, name string) error
	// Mount attaches the volume if needed and mounts it at target (an
	// absolute path, created if missing). Mounted at target already
	// succeeds; mounted elsewhere returns ErrInUse.
	Mount(ctx context.Context, name, target string) error
	// Unmount unmounts the volume wherever it is mounted; the device stays
	// attached. Unmounting an unmounted volume succeeds.
	Unmount(ctx context.Context, name string) error
	// Grow enlarges the volume and its file system to size; online when the
	// volume is mounted. A size below the current one is ErrInvalid (use
	// Shrink); the current size re-runs the file-system resize only.
	Grow(ctx context.Context, name string, size int64) error
	// Shrink reduces the volume to size. It returns ErrCannotShrink,
	// nothing changed, unless allowShrink is true and the used bytes plus
	// ShrinkMargin fit in size; ErrInUse when mounted.
	Shrink(ctx context.Context, name string, size int64, allowShrink bool) error
	// Trim hands the file system's unused blocks back to the host and
	// returns how many bytes the file system reported trimmed.
	Trim(ctx context.Context, name string) (int64, error)
	// Stat describes one volume; ErrNotFound when it does not exist.
	Stat(ctx context.Context, name string) (Info, error)
	// List describes every volume, sorted by name.
	List(ctx context.Context) ([]Info, error)
	// Delete removes the volume and its data. An attached or mounted volume
	// returns ErrInUse unless force, which unmounts and detaches it first.
	// Deleting a missing volume returns ErrNotFound.
	Delete(ctx context.Context, name string, force bool) error
}

// Mover is the optional ability to copy a volume out as a byte stream and
// back in, the building block of moving a volume to another node and of
// backups.
type Mover interface {
	// Export writes the volume's raw image (SizeBytes bytes) to w. The
	// volume must not be mounted (ErrInUse). progress, if not nil, is
	// called as bytes go out with done and total bytes.
	Export(ctx context.Context, name string, w io.Writer, progress func(done, total int64)) error
	// Import makes a new volume from size bytes read from r, as Export
	// wrote them; ErrExists when the name is taken. Nothing is left behind
	// when it fails.
	Import(ctx context.Context, name string, r io.Reader, size int64, progress func(done, total int64)) error
}

// DeviceGrower is a backend that can enlarge a volume's block device
// without touching its file system, for volumes whose file system is
// mounted where the backend cannot reach it (inside a VM, which then
// grows it itself).
type DeviceGrower interface {
	// GrowDevice enlarges volume name's image and block device to size
	// bytes; the file system keeps its size. A size below the current
	// one is ErrInvalid; the current size changes nothing.
	GrowDevice(ctx context.Context, name string, size int64) error
}

// Snapshotter is a backend that copies a volume to a file without
// stopping its guest (the hook later backups build on).
type Snapshotter interface {
	// Snapshot writes a consistent copy of volume name to dest and
	// returns its size. dest must not exist.
	Snapshot(ctx context.Context, name, dest string) (int64, error)
}

// ValidateName returns nil when name is a valid volume name: a DNS label
// (see corpus/internal/names), so it can never escape a backend's folder.
// The error wraps ErrInvalid.
func ValidateName(name string) error {
	if err := names.Validate("volume", name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// NormalizeSize is the one rule that turns a requested size into a
// volume's size: size rounded up to Align, or an error wrapping ErrInvalid
// when it is below MinSize or above MaxSize. The API applies it to what
// people ask for, so a desired size is one a backend makes exactly (a
// backend that rounded on its own would leave its volume at a size other
// than the desired one, and a reconciler comparing the two would resize it
// on every pass).
func NormalizeSize(size int64) (int64, error) {
	if size < MinSize {
		return 0, fmt.Errorf("%w: size %d is below the minimum of %d bytes (%d MiB)", ErrInvalid, size, MinSize, MinSize/MiB)
	}
	if size > MaxSize {
		return 0, fmt.Errorf("%w: size %d is above the maximum of %d bytes (%d TiB)", ErrInvalid, size, MaxSize, MaxSize/TiB)
	}
	return (size + Align - 1) / Align * Align, nil
}

// CheckSize returns nil when size is a volume's size as NormalizeSize
// makes them (in range, a multiple of Align), or an error wrapping
// ErrInvalid that says what is wrong. Backends check sizes with it and
// never round.
func CheckSize(size int64) error {
	n, err := NormalizeSize(size)
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("%w: size %d is not a multiple of %d bytes (%d would be)", ErrInvalid, size, Align, n)
	}
	return nil
}

// ShrinkMargin is the free space a shrink must leave beside used bytes:
// a tenth of them, and never less than 64 MiB.
func ShrinkMargin(used int64) int64 {
	return max(used/10, minMargin)
}

// CheckShrink returns nil when a volume with used bytes may shrink to size,
// or an error wrapping ErrCannotShrink that says why not.
func CheckShrink(used, size int64, allowShrink bool) error {
	if !allowShrink {
		return fmt.Errorf("%w: shrinking needs an explicit opt-in (allowShrink)", ErrCannotShrink)
	}
	if need := used + ShrinkMargin(used); size < need {
		return fmt.Errorf("%w: %s (%d bytes) used needs at least %s with the safety margin, asked for %s",
			ErrCannotShrink, units.FormatSize(used), used, units.FormatSize(need), units.FormatSize(size))
	}
	return nil
}
