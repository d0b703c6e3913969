package loop

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"corpus/volume"
)

// FIFREEZE and FITHAW: _IOWR('X', 119 and 120, int).
const (
	fifreeze = 0xc0045877
	fithaw   = 0xc0045878
)

var _ volume.Snapshotter = (*Backend)(nil)

// Snapshot copies volume name's image to dest, a new file, sparsely: holes
// stay holes and zero blocks are not written. A mounted volume's file
// system is frozen for the copy (writes wait, nothing is lost) and thawed
// after, so the copy is consistent as after a clean crash. It returns the
// image size. dest appears only when complete.
func (b *Backend) Snapshot(ctx context.Context, name, dest string) (int64, error) {
	defer b.lock(name)()
	s, err := b.inspect(name)
	if err != nil {
		return 0, err
	}
	if !filepath.IsAbs(dest) {
		return 0, fmt.Errorf("%w: snapshot path %q is not absolute", volume.ErrInvalid, dest)
	}
	if _, err := os.Lstat(dest); err == nil {
		return 0, fmt.Errorf("%w: %s", volume.ErrExists, dest)
	}
	if s.mounted() {
		thaw, err := freeze(s.mounts[0])
		if err != nil {
			return 0, fmt.Errorf("snapshotting %s: %w", name, err)
		}
		defer thaw()
	}
	src, err := os.Open(s.image)
	if err != nil {
		return 0, fmt.Errorf("snapshotting %s: %w", name, err)
	}
	defer src.Close()
	if err := os.MkdirAll(filepath.Dir(dest), 0o700); err != nil {
		return 0, fmt.Errorf("snapshotting %s: %w", name, err)
	}
	tmp := dest + ".partial"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("snapshotting %s: %w", name, err)
	}
	defer os.Remove(tmp) // no-op after the rename
	w := &sparseWriter{f: out, zeros: make([]byte, chunk)}
	err = copySparse(ctx, w, src, s.size, nil)
	if err == nil {
		err = out.Truncate(s.size)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dest)
	}
	if err != nil {
		return 0, fmt.Errorf("snapshotting %s: %w", name, err)
	}
	b.log.Info("volume snapshot", "volume", name, "dest", dest, "size", s.size)
	return s.size, nil
}

// freeze freezes the file system mounted at dir and returns its thaw.
func freeze(dir string) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", dir, err)
	}
	if err := unix.IoctlSetInt(int(f.Fd()), fifreeze, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("freezing %s: %w", dir, err)
	}
	return func() {
		unix.IoctlSetInt(int(f.Fd()), fithaw, 0)
		f.Close()
	}, nil
}

// sparseWriter writes a stream into a file at increasing offsets, leaving
// zero blocks as holes.
type sparseWriter struct {
	f     *os.File
	off   int64
	zeros []byte
}

func (w *sparseWriter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		n := min(len(p), len(w.zeros))
		if err := writeNonZero(w.f, p[:n], w.off, w.zeros); err != nil {
			return 0, err
		}
		w.off += int64(n)
		p = p[n:]
	}
	return total, nil
}
