// Package backup keeps the backups a node holds for the cluster: one file
// per backup under the agent's state folder, written whole or not at all
// (a temporary file, synced, checked against the size and SHA-256 the
// sender gives last, then renamed), read back only after its checksum is
// verified again, and removed when the replicated state no longer names
// it (level-based: a backup deleted while the node was away goes when it
// comes back).
//
// What is in a backup is the service's business (a template's backup
// script wrote it); this package moves bytes and vouches for them.
package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrCorrupt is returned when a kept backup no longer matches its
// checksum, or a received one does not match what the sender said.
var ErrCorrupt = errors.New("backup does not match its checksum")

// ErrNotFound is returned for a backup this node does not keep.
var ErrNotFound = errors.New("backup not kept on this node")

// tmpPrefix names files being written; Prune removes stale ones.
const tmpPrefix = ".tmp-"

var idRe = regexp.MustCompile(`^[0-9a-f]{4,64}$`)

// Store is the folder of a node's kept backups.
type Store struct {
	dir string
}

// Open returns the store in dir, made if missing.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("backup store: %w", err)
	}
	return &Store{dir: dir}, nil
}

func (s *Store) path(id string) (string, error) {
	if !idRe.MatchString(id) {
		return "", fmt.Errorf("backup id %q is not a hex id", id)
	}
	return filepath.Join(s.dir, id+".backup"), nil
}

// Writer receives one backup; Commit keeps it, Abort drops it.
//
// It writes behind: every flushEvery bytes it starts the kernel writing
// them out and waits for the block before, so no more than two blocks
// are ever dirty. Left to itself the kernel holds a backup of hundreds
// of megabytes in memory and writes it all at the Commit's fsync, and a
// database on the same disk then waits on that burst for each commit.
type Writer struct {
	f       *os.File
	path    string
	h       hash.Hash
	n       int64
	flushed int64 // bytes handed to writeback
	waited  int64 // bytes known to be on disk
}

// flushEvery is the block a Writer hands to writeback at once.
const flushEvery = 8 << 20

// Create starts receiving backup id. A backup of that id kept already
// stays until the new one is committed over it.
func (s *Store) Create(id string) (*Writer, error) {
	p, err := s.path(id)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(s.dir, tmpPrefix+id+"-")
	if err != nil {
		return nil, fmt.Errorf("backup store: %w", err)
	}
	return &Writer{f: f, path: p, h: sha256.New()}, nil
}

func (w *Writer) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	w.h.Write(b[:n])
	w.n += int64(n)
	if w.n-w.flushed >= flushEvery {
		w.writeBehind()
	}
	return n, err
}

// writeBehind starts writeback of what was written since the last call
// and waits for the block before it, then drops that block from the page
// cache (nothing reads a backup back soon, and the memory is the
// services'). Errors are left for Commit's fsync to report: these calls
// only pace the writing.
func (w *Writer) writeBehind() {
	fd := int(w.f.Fd())
	_ = unix.SyncFileRange(fd, w.flushed, w.n-w.flushed, unix.SYNC_FILE_RANGE_WRITE)
	if w.flushed > w.waited {
		_ = unix.SyncFileRange(fd, w.waited, w.flushed-w.waited,
			unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
		_ = unix.Fadvise(fd, w.waited, w.flushed-w.waited, unix.FADV_DONTNEED)
		w.waited = w.flushed
	}
	w.flushed = w.n
}

// Sum is what was written so far: its size and SHA-256 (hex).
func (w *Writer) Sum() (int64, string) { return w.n, hex.EncodeToString(w.h.Sum(nil)) }

// Commit keeps the backup if what was written is size bytes with the
// SHA-256 sum; otherwise it drops it and returns ErrCorrupt.
func (w *Writer) Commit(size int64, sum string) error {
	n, got := w.Sum()
	if n != size || got != sum {
		w.Abort()
		return fmt.Errorf("%w: received %d bytes (SHA-256 %s), the sender says %d (%s)", ErrCorrupt, n, got, size, sum)
	}
	if err := w.f.Sync(); err != nil {
		w.Abort()
		return fmt.Errorf("backup store: %w", err)
	}
	tmp := w.f.Name()
	if err := w.f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("backup store: %w", err)
	}
	if err := os.Rename(tmp, w.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("backup store: %w", err)
	}
	if d, err := os.Open(filepath.Dir(w.path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Abort drops what was received.
func (w *Writer) Abort() {
	w.f.Close()
	os.Remove(w.f.Name())
}

// Verify checks a kept backup against its size and SHA-256 by reading it
// whole.
func (s *Store) Verify(id string, size int64, sum string) error {
	p, err := s.path(id)
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("backup %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("reading backup %s: %w", id, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != size || got != sum {
		return fmt.Errorf("%w: backup %s is %d bytes with SHA-256 %s; it was %d bytes with %s", ErrCorrupt, id, n, got, size, sum)
	}
	return nil
}

// Read returns a kept backup to read once its checksum is verified: a
// corrupt one is refused before any byte of it is handed out.
func (s *Store) Read(id string, size int64, sum string) (io.ReadCloser, error) {
	if err := s.Verify(id, size, sum); err != nil {
		return nil, err
	}
	p, _ := s.path(id)
	return os.Open(p)
}

// Remove removes a kept backup; one not kept is success.
func (s *Store) Remove(id string) error {
	p, err := s.path(id)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Prune removes the kept backups whose ids keep does not name and files
// being received (a transfer that died with its agent), of both only
// those last written before staleBefore: a list a little behind (the
// agent's cached desired state, read before a backup it received) never
// costs a backup. It returns the ids it removed.
func (s *Store) Prune(keep map[string]bool, staleBefore time.Time) ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) {
			if info, err := e.Info(); err == nil && info.ModTime().Before(staleBefore) {
				errs = append(errs, os.Remove(filepath.Join(s.dir, name)))
			}
			continue
		}
		id, ok := strings.CutSuffix(name, ".backup")
		if !ok || keep[id] {
			continue
		}
		if info, err := e.Info(); err != nil || !info.ModTime().Before(staleBefore) {
			continue
		}
		if err := os.Remove(filepath.Join(s.dir, name)); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, id)
	}
	return removed, errors.Join(errs...)
}
