package loop

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"corpus/internal/keylock"
	"corpus/volume"
)

// Config configures a Backend.
type Config struct {
	// Root is the folder holding the images; it is created (0700) if
	// missing. Required, absolute.
	Root string
	// Logger receives the backend's logs; nil discards them.
	Logger *slog.Logger
}

// Backend is the loop-backed ext4 volume backend. It is safe for
// concurrent use.
type Backend struct {
	root string
	log  *slog.Logger
	// growOnline: this process may resize a mounted ext4 file system.
	growOnline bool

	locks keylock.Map // per volume name
}

var (
	_ volume.Backend = (*Backend)(nil)
	_ volume.Mover   = (*Backend)(nil)
)

const (
	imageSuffix = ".img"
	tempPrefix  = ".tmp-"
	// labelMax is the longest ext4 volume label.
	labelMax = 16
)

// Capabilities reports that loop volumes shrink offline and trim, and
// have no snapshots yet. They grow online when the process holds
// CAP_SYS_RESOURCE, which the kernel demands for resizing a mounted ext4
// file system; without it Grow of a mounted volume returns
// volume.ErrNotSupported and the caller unmounts first.
func (b *Backend) Capabilities() volume.Capabilities {
	return volume.Capabilities{GrowOnline: b.growOnline, ShrinkOffline: true, Discard: true, Snapshot: true}
}

// Root returns the folder holding the images.
func (b *Backend) Root() string { return b.root }

// ImagePath returns the image file of volume name, or an error wrapping
// volume.ErrInvalid when name is not a valid volume name.
func (b *Backend) ImagePath(name string) (string, error) {
	if err := volume.ValidateName(name); err != nil {
		return "", err
	}
	return filepath.Join(b.root, name+imageSuffix), nil
}

// lock serializes operations on one volume; it returns the unlock.
func (b *Backend) lock(name string) func() { return b.locks.Lock(name) }

func newBackend(cfg Config) (*Backend, error) {
	if cfg.Root == "" || !filepath.IsAbs(cfg.Root) {
		return nil, fmt.Errorf("%w: root %q is not an absolute path", volume.ErrInvalid, cfg.Root)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Backend{
		root: filepath.Clean(cfg.Root),
		log:  log.With("component", "volume", "backend", "loop"),
	}, nil
}

// label is the ext4 label of a volume: its name, cut to 16 bytes.
func label(name string) string {
	if len(name) > labelMax {
		return name[:labelMax]
	}
	return name
}

// volumeName returns the volume name of an image file name, or false.
func volumeName(file string) (string, bool) {
	name, ok := strings.CutSuffix(file, imageSuffix)
	if !ok || volume.ValidateName(name) != nil {
		return "", false
	}
	return name, true
}
