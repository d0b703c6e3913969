//go:build linux && cgo

package lxc

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Unprivileged guests run in a user namespace: their root is an
// ordinary, unused host user. Every guest of a node shares one map, as
// Incus's default does: guests are apart by their namespaces (pid, ipc,
// mount, network), and their files live in folders no other guest sees.
// The map comes from root's subordinate ids in /etc/subuid and
// /etc/subgid, which liblxc's newuidmap/newgidmap check; a host without
// an entry for root gets one (idmapStart, idmapHostRange ids), as Incus
// asks its operators to add.
const (
	// guestIDs is how many ids a guest's namespace maps: 0-65535.
	guestIDs = 65536
	// idmapStart and idmapHostRange are the entry written for root
	// where it has none.
	idmapStart     = 1_000_000
	idmapHostRange = 1_000_000_000
)

// idmap is where a guest's ids 0..guestIDs-1 live on the host.
type idmap struct {
	UID int64 `json:"uid"`
	GID int64 `json:"gid"`
}

// hostIDMap returns the map for this host's unprivileged guests, from
// root's ranges in subuidFile and subgidFile, adding a range for root to
// a file that has none large enough.
func hostIDMap(subuidFile, subgidFile string) (idmap, error) {
	uid, err := subordinate(subuidFile)
	if err != nil {
		return idmap{}, err
	}
	gid, err := subordinate(subgidFile)
	if err != nil {
		return idmap{}, err
	}
	return idmap{UID: uid, GID: gid}, nil
}

// subordinate returns the start of root's first range of at least
// guestIDs ids in file (/etc/subuid format: "name:start:count"), appending
// one after every other entry when root has none.
func subordinate(file string) (int64, error) {
	b, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("reading %s: %w", file, err)
	}
	next := int64(idmapStart)
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(f) != 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		start, err1 := strconv.ParseInt(f[1], 10, 64)
		count, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if (f[0] == "root" || f[0] == "0") && count >= guestIDs {
			return start, nil
		}
		next = max(next, start+count)
	}
	line := fmt.Sprintf("root:%d:%d\n", next, int64(idmapHostRange))
	if len(b) > 0 && !strings.HasSuffix(string(b), "\n") {
		line = "\n" + line
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("adding root's subordinate ids to %s: %w", file, err)
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return 0, fmt.Errorf("adding root's subordinate ids to %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("adding root's subordinate ids to %s: %w", file, err)
	}
	return next, nil
}

// shift moves the ownership of every file under root into the map:
// uid u becomes m.UID+u (likewise for groups). Ids already in the map,
// or beyond what a guest maps, are left as they are. Set-id bits, which
// chown clears, are put back. Symbolic links are changed themselves,
// never followed. root itself is shifted last, so shifted(root) tells a
// finished shift from an interrupted one, which runs again.
func shift(root string, m idmap) error {
	err := filepath.WalkDir(root, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == root {
			return nil
		}
		return shiftOne(path, m)
	})
	if err != nil {
		return err
	}
	return shiftOne(root, m)
}

func shiftOne(path string, m idmap) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return err
	}
	uid, gid := int64(st.Uid), int64(st.Gid)
	if uid < guestIDs {
		uid += m.UID
	}
	if gid < guestIDs {
		gid += m.GID
	}
	if uid == int64(st.Uid) && gid == int64(st.Gid) {
		return nil
	}
	if err := unix.Lchown(path, int(uid), int(gid)); err != nil {
		return fmt.Errorf("shifting %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		if err := unix.Chmod(path, st.Mode&0o7777); err != nil {
			return fmt.Errorf("shifting %s: %w", path, err)
		}
	}
	return nil
}

// shifted reports whether path's owner is inside the map.
func shifted(path string, m idmap) (bool, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return false, err
	}
	return int64(st.Uid) >= m.UID && int64(st.Uid) < m.UID+guestIDs, nil
}

// searchable lets every user search (not list) the folders from / down to
// path: an unprivileged guest's root, an ordinary host user, must reach
// its root file system under it, as liblxc checks at start. Folders that
// hold secrets keep them in files only their owner can read.
func searchable(path string) error {
	for p := path; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, fi.Mode().Perm()|0o111); err != nil {
				return fmt.Errorf("letting unprivileged guests reach %s: %w", path, err)
			}
		}
		if p == "/" || p == "." {
			return nil
		}
	}
}
