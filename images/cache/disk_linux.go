package cache

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// DiskUsage is the space path takes on disk, a folder's files and
// folders included, each inode counted once; the walk stays on path's
// file system. What cannot be read counts as nothing.
func DiskUsage(path string) int64 {
	var n int64
	seen := map[[2]uint64]bool{}
	var dev uint64
	filepath.WalkDir(path, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if p == path {
			dev = st.Dev
		} else if st.Dev != dev {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		key := [2]uint64{st.Dev, st.Ino}
		if !seen[key] {
			seen[key] = true
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}

// ParseMax reads a cache's cap (ParseLimit) for a cache in dir, a
// share taken of the file system holding dir. It returns bytes, 0 for
// no cap.
func ParseMax(s, dir string) (int64, error) {
	n, pct, err := ParseLimit(s)
	if err != nil || pct == 0 {
		return n, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("image cache cap %q: measuring the file system of %s: %w", s, dir, err)
	}
	return int64(float64(st.Blocks) * float64(st.Bsize) * pct / 100), nil
}
