package loop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"corpus/internal/revert"
	"corpus/volume"
)

// chunk is the unit of Export and Import I/O and of progress reports.
const chunk = 1 << 20

// Export writes the raw image of volume name, SizeBytes bytes, to w: the
// plain bytes a block device would hold, so any tool (dd, a remote
// Import) can read it. It reads sparsely: holes in the image (found with
// SEEK_DATA/SEEK_HOLE) are written as zeros without reading the disk. The
// volume must not be mounted (volume.ErrInUse); it may stay attached.
// progress, if not nil, gets the bytes written and the total after every
// chunk.
func (b *Backend) Export(ctx context.Context, name string, w io.Writer, progress func(done, total int64)) error {
	defer b.lock(name)()
	s, err := b.inspect(name)
	if err != nil {
		return err
	}
	if s.mounted() {
		return fmt.Errorf("%w: exporting %s needs it unmounted; it is mounted at %s", volume.ErrInUse, name, s.mounts[0])
	}
	f, err := os.Open(s.image)
	if err != nil {
		return fmt.Errorf("exporting %s: %w", name, err)
	}
	defer f.Close()
	if err := copySparse(ctx, w, f, s.size, progress); err != nil {
		return fmt.Errorf("exporting %s: %w", name, err)
	}
	return nil
}

func copySparse(ctx context.Context, w io.Writer, f *os.File, size int64, progress func(done, total int64)) error {
	buf := make([]byte, chunk)
	zeros := make([]byte, chunk)
	report := func(done int64) {
		if progress != nil {
			progress(done, size)
		}
	}
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // only a hole is left
			data = size
		} else if err != nil {
			return fmt.Errorf("finding data: %w", err)
		}
		data = min(data, size)
		// A hole: zeros, a chunk at a time.
		for off < data {
			n := min(int64(chunk), data-off)
			if _, err := w.Write(zeros[:n]); err != nil {
				return err
			}
			off += n
			report(off)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if off >= size {
			break
		}
		hole, err := unix.Seek(fd, off, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("finding hole: %w", err)
		}
		hole = min(hole, size)
		for off < hole {
			n := min(int64(chunk), hole-off)
			if _, err := f.ReadAt(buf[:n], off); err != nil {
				return fmt.Errorf("reading image: %w", err)
			}
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
			off += n
			report(off)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Import makes volume name from size bytes of a raw image read from r, as
// Export writes them. Chunks of zeros are not written, so the new image is
// sparse again. The image must hold an ext4 file system that e2fsck finds
// clean; its label is set to name. It appears under its final name only
// when complete. A taken name is volume.ErrExists; a short stream is
// io.ErrUnexpectedEOF. progress, if not nil, gets the bytes read and size.
func (b *Backend) Import(ctx context.Context, name string, r io.Reader, size int64, progress func(done, total int64)) error {
	image, err := b.ImagePath(name)
	if err != nil {
		return err
	}
	if err := volume.CheckSize(size); err != nil {
		return err
	}
	defer b.lock(name)()
	if _, err := os.Lstat(image); err == nil {
		return fmt.Errorf("%w: %s", volume.ErrExists, name)
	}

	rv := revert.New()
	defer rv.Fail()
	f, err := os.CreateTemp(b.root, tempPrefix+name+"-*")
	if err != nil {
		return fmt.Errorf("importing %s: %w", name, err)
	}
	tmp := f.Name()
	rv.Add(func() { os.Remove(tmp) })
	err = receiveSparse(ctx, f, r, size, progress)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("importing %s: %w", name, err)
	}
	if _, err := b.run(ctx, "e2fsck", "-f", "-n", tmp); err != nil {
		return fmt.Errorf("%w: importing %s: the image is not a clean ext4 file system: %w", volume.ErrInvalid, name, err)
	}
	if _, err := b.run(ctx, "e2label", tmp, label(name)); err != nil {
		return fmt.Errorf("importing %s: %w", name, err)
	}
	if err := os.Rename(tmp, image); err != nil {
		return fmt.Errorf("importing %s: %w", name, err)
	}
	if err := syncFile(b.root); err != nil {
		return fmt.Errorf("syncing volume root: %w", err)
	}
	rv.Success()
	b.log.Info("volume imported", "volume", name, "size", size)
	return nil
}

// writeNonZero writes the runs of p that are not all zeros, in blocks of
// volume.Align, at off in f; zero blocks stay holes.
func writeNonZero(f *os.File, p []byte, off int64, zeros []byte) error {
	const blk = volume.Align
	start := -1 // first block of the current non-zero run
	for i := 0; i <= len(p); i += blk {
		zero := i == len(p) || bytes.Equal(p[i:min(i+blk, len(p))], zeros[:min(blk, len(p)-i)])
		switch {
		case !zero && start < 0:
			start = i
		case zero && start >= 0:
			if _, err := f.WriteAt(p[start:i], off+int64(start)); err != nil {
				return err
			}
			start = -1
		}
	}
	return nil
}

func receiveSparse(ctx context.Context, f *os.File, r io.Reader, size int64, progress func(done, total int64)) error {
	buf := make([]byte, chunk)
	zeros := make([]byte, chunk)
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(int64(chunk), size-off)
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("reading stream at %d of %d bytes: %w", off, size, err)
		}
		if err := writeNonZero(f, buf[:n], off, zeros); err != nil {
			return fmt.Errorf("writing image: %w", err)
		}
		off += n
		if progress != nil {
			progress(off, size)
		}
	}
	return f.Truncate(size)
}
