package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
)

// Counter is a writer that counts and hashes (SHA-256) what goes through
// it to w.
type Counter struct {
	w io.Writer
	n int64
	h hash.Hash
}

// NewCounter returns a Counter writing to w.
func NewCounter(w io.Writer) *Counter { return &Counter{w: w, h: sha256.New()} }

func (c *Counter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.h.Write(b[:n])
	c.n += int64(n)
	return n, err
}

// Size is how many bytes went through.
func (c *Counter) Size() int64 { return c.n }

// Sum is their SHA-256, hex.
func (c *Counter) Sum() string { return hex.EncodeToString(c.h.Sum(nil)) }

// Spool keeps what r gives in an unnamed file in dir and returns it,
// read from its start, once all of it arrived and matches size and sum:
// a restore reads nothing before that. The file goes when it is closed.
func Spool(dir string, r io.Reader, size int64, sum string) (*os.File, error) {
	f, err := os.CreateTemp(dir, "restore-")
	if err != nil {
		return nil, fmt.Errorf("keeping the backup aside: %w", err)
	}
	os.Remove(f.Name()) // open, it stays until closed
	c := NewCounter(f)
	if _, err := io.Copy(c, r); err != nil {
		f.Close()
		return nil, fmt.Errorf("receiving the backup: %w", err)
	}
	if c.Size() != size || c.Sum() != sum {
		f.Close()
		return nil, fmt.Errorf("%w: the backup received is %d bytes with SHA-256 %s; it was %d bytes with %s: nothing restored", ErrCorrupt, c.Size(), c.Sum(), size, sum)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
