package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

func put(t *testing.T, s *Store, id string, data []byte) {
	t.Helper()
	w, err := s.Create(id)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	if err := w.Commit(int64(len(data)), sum(data)); err != nil {
		t.Fatal(err)
	}
}

func TestKeepAndRead(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("row\n"), 100000)
	put(t, s, "ab12", data)
	r, err := s.Read("ab12", int64(len(data)), sum(data))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if !bytes.Equal(got, data) {
		t.Fatal("read back other bytes than kept")
	}
	if _, err := s.Read("cd34", 1, sum([]byte("x"))); !errors.Is(err, ErrNotFound) {
		t.Errorf("Read(a backup not kept) = %v, want ErrNotFound", err)
	}
	if _, err := s.Create("../escape"); err == nil {
		t.Error("Create took an id that is a path")
	}
}

// TestMismatchDropped: what does not match the sender's size and
// checksum is never kept, and a kept backup that rots is refused before
// any of it is read.
func TestMismatchDropped(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	w, _ := s.Create("ab12")
	w.Write([]byte("truncated"))
	if err := w.Commit(100, sum([]byte("the whole dump"))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Commit(wrong size) = %v, want ErrCorrupt", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused backup left %d files", len(entries))
	}
	data := []byte("a good dump")
	put(t, s, "ab12", data)
	p := filepath.Join(dir, "ab12.backup")
	os.WriteFile(p, []byte("a good dumq"), 0o600) // one bit off on disk
	if _, err := s.Read("ab12", int64(len(data)), sum(data)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Read(a rotten backup) = %v, want ErrCorrupt", err)
	}
}

func TestPrune(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	put(t, s, "aa11", []byte("kept"))
	put(t, s, "bb22", []byte("gone from the state"))
	put(t, s, "ee55", []byte("received just now, not listed yet"))
	w, _ := s.Create("cc33") // a transfer in flight
	w.Write([]byte("half"))
	old, _ := s.Create("dd44") // one that died with its agent
	old.Write([]byte("half"))
	past := time.Now().Add(-time.Hour)
	os.Chtimes(old.f.Name(), past, past)
	os.Chtimes(filepath.Join(dir, "bb22.backup"), past, past)
	removed, err := s.Prune(map[string]bool{"aa11": true}, time.Now().Add(-10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != "bb22" {
		t.Errorf("Prune removed %v, want [bb22]", removed)
	}
	if _, err := os.Stat(w.f.Name()); err != nil {
		t.Errorf("Prune removed a transfer in flight: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ee55.backup")); err != nil {
		t.Errorf("Prune removed a backup received a moment ago: %v", err)
	}
	if _, err := os.Stat(old.f.Name()); err == nil {
		t.Error("Prune kept a stale partial file")
	}
	if err := s.Verify("aa11", 4, sum([]byte("kept"))); err != nil {
		t.Errorf("the kept backup: %v", err)
	}
}

// TestWriteBehind: a backup being received is written out as it comes,
// not held in memory for the Commit's fsync. The first blocks of the
// file are out of the page cache while the rest is still arriving,
// which the kernel allows only for pages already on disk.
func TestWriteBehind(t *testing.T) {
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary folder is a tmpfs, which has no writeback")
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Create("abcd")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	block := bytes.Repeat([]byte{7}, 1<<20)
	for range 4 * flushEvery >> 20 {
		if _, err := w.Write(block); err != nil {
			t.Fatal(err)
		}
	}
	if w.waited < 2*flushEvery {
		t.Fatalf("%d of %d bytes known on disk; want the blocks but the last one or two", w.waited, w.n)
	}
	resident := func(off, n int64) int {
		m, err := unix.Mmap(int(w.f.Fd()), off, int(n), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(m)
		vec := make([]byte, (n+int64(os.Getpagesize())-1)/int64(os.Getpagesize()))
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			t.Fatal(e)
		}
		in := 0
		for _, v := range vec {
			in += int(v & 1)
		}
		return in
	}
	pages := flushEvery / os.Getpagesize()
	if in := resident(0, flushEvery); in > pages/10 {
		t.Errorf("%d of the first block's %d pages still in memory; want them written and dropped", in, pages)
	}
	if in := resident(w.n-flushEvery/2, flushEvery/2); in == 0 {
		t.Errorf("the last pages written are not in memory: the check cannot tell written from dropped")
	}
}
