package loop

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"corpus/volume"
)

// TestSnapshot: a mounted volume is copied without unmounting it; the copy
// is sparse, a clean file system, and holds the data; an existing target
// is refused.
func TestSnapshot(t *testing.T) {
	b, root := newTestBackend(t)
	ctx := context.Background()
	must(t, "Create", b.Create(ctx, "snap", 64<<20))
	mnt := filepath.Join(root, "mnt-snap")
	must(t, "Mount", b.Mount(ctx, "snap", mnt))
	if err := os.WriteFile(filepath.Join(mnt, "file"), []byte("snapshotted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "snap-1.img")
	size, err := b.Snapshot(ctx, "snap", dest)
	if err != nil || size != 64<<20 {
		t.Fatalf("Snapshot = %d, %v; want 64 MiB", size, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dest, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 64<<20 || st.Blocks*512 >= st.Size/2 {
		t.Errorf("snapshot is %d bytes with %d allocated; want 64 MiB, sparse", st.Size, st.Blocks*512)
	}
	fsckClean(t, dest)
	out, err := exec.Command("debugfs", "-R", "cat /file", dest).Output()
	if err != nil || !strings.Contains(string(out), "snapshotted") {
		t.Errorf("file in the snapshot = %q, %v; want snapshotted", out, err)
	}
	// The volume is still mounted and writable after the thaw.
	if err := os.WriteFile(filepath.Join(mnt, "after"), []byte("x"), 0o644); err != nil {
		t.Errorf("writing after the snapshot: %v", err)
	}
	if _, err := b.Snapshot(ctx, "snap", dest); !errors.Is(err, volume.ErrExists) {
		t.Errorf("Snapshot onto an existing file = %v, want ErrExists", err)
	}
	if _, err := b.Snapshot(ctx, "nope", dest+"2"); !errors.Is(err, volume.ErrNotFound) {
		t.Errorf("Snapshot of a missing volume = %v, want ErrNotFound", err)
	}
	must(t, "Unmount", b.Unmount(ctx, "snap"))
	must(t, "Delete", b.Delete(ctx, "snap", true))
}
