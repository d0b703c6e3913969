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

	"corpus/drivers"
)

// Unprivileged guests run in a user namespace: their root is an
// ordinary, unused host user. Each guest has a range of the host's ids
// of its own (Incus's security.idmap.isolated), so no two guests' files
// have one owner on the host and per-user kernel limits (processes,
// inotify watches, keys) are not shared between tenants.
//
// The ranges are cut from root's subordinate ids in /etc/subuid and
// /etc/subgid (what newuidmap checks; a host without an entry for root
// gets one, idmapStart and idmapHostRange ids, as Incus asks its
// operators to add): range i maps a guest's ids 0..guestIDs-1 to
// start+i×guestIDs on. Range 0 is the one every guest shared before
// guests had ranges of their own, and what a guest without one (an older
// coordinator placed it) still gets; ranges 1..hostIDs.ranges are given
// by the coordinator, each to one guest of the node.
const (
	// guestIDs is how many ids a guest's namespace maps: 0-65535.
	guestIDs = drivers.IDRangeSize
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

// hostIDs are root's subordinate ids that guests' ranges come from.
type hostIDs struct {
	uid, gid subrange
	// ranges is how many ranges beyond range 0 both hold.
	ranges uint32
}

// subrange is one "name:start:count" entry of /etc/subuid.
type subrange struct{ start, count int64 }

func (r subrange) contains(id int64) bool { return id >= r.start && id < r.start+r.count }

// readHostIDs returns the ranges of this host's unprivileged guests,
// from root's entries in subuidFile and subgidFile, adding an entry for
// root to a file that has none large enough.
func readHostIDs(subuidFile, subgidFile string) (hostIDs, error) {
	uid, err := subordinate(subuidFile)
	if err != nil {
		return hostIDs{}, err
	}
	gid, err := subordinate(subgidFile)
	if err != nil {
		return hostIDs{}, err
	}
	n := min(uid.count, gid.count)/guestIDs - 1
	return hostIDs{uid: uid, gid: gid, ranges: uint32(min(n, 1<<31))}, nil
}

// idmap returns the map of range r; an error names what is missing when
// the host has no such range.
func (h hostIDs) idmap(r uint32) (idmap, error) {
	if r > h.ranges {
		return idmap{}, fmt.Errorf("id range %d is beyond this host's %d: root's subordinate ids (%d from %d in /etc/subuid, %d from %d in /etc/subgid) hold %d ranges of %d after the shared one; give root more in both files: %w",
			r, h.ranges, h.uid.count, h.uid.start, h.gid.count, h.gid.start, h.ranges, guestIDs, drivers.ErrInvalidSpec)
	}
	return idmap{UID: h.uid.start + int64(r)*guestIDs, GID: h.gid.start + int64(r)*guestIDs}, nil
}

// guestID is the id inside a guest that host id id stands for, whatever
// range it is in: ids below guestIDs are a privileged guest's or an
// image's own, ids in root's subordinate entry are some range's. ok is
// false for ids neither (left as they are).
func (r subrange) guestID(id int64) (int64, bool) {
	switch {
	case id < guestIDs:
		return id, true
	case r.contains(id):
		return (id - r.start) % guestIDs, true
	}
	return 0, false
}

// subordinate returns root's first entry of at least guestIDs ids in
// file (/etc/subuid format: "name:start:count"), appending one after
// every other entry when root has none.
func subordinate(file string) (subrange, error) {
	b, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return subrange{}, fmt.Errorf("reading %s: %w", file, err)
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
			return subrange{start: start, count: count}, nil
		}
		next = max(next, start+count)
	}
	line := fmt.Sprintf("root:%d:%d\n", next, int64(idmapHostRange))
	if len(b) > 0 && !strings.HasSuffix(string(b), "\n") {
		line = "\n" + line
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return subrange{}, fmt.Errorf("adding root's subordinate ids to %s: %w", file, err)
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return subrange{}, fmt.Errorf("adding root's subordinate ids to %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return subrange{}, fmt.Errorf("adding root's subordinate ids to %s: %w", file, err)
	}
	return subrange{start: next, count: idmapHostRange}, nil
}

// shift moves the ownership of every file under root into the map m,
// from whichever range it is in (see guestID): the image's own ids, a
// privileged guest's, or another guest's range (a volume bound again, a
// guest moved to its own range). Ids outside all of these are left as
// they are. Set-id bits, which chown clears, are put back. Symbolic
// links are changed themselves, never followed. root itself is shifted
// last, so shifted(root) tells a finished shift from an interrupted one,
// which runs again.
func (h hostIDs) shift(root string, m idmap) error {
	err := filepath.WalkDir(root, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == root {
			return nil
		}
		return h.shiftOne(path, m)
	})
	if err != nil {
		return err
	}
	return h.shiftOne(root, m)
}

func (h hostIDs) shiftOne(path string, m idmap) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return err
	}
	uid, gid := int64(st.Uid), int64(st.Gid)
	if g, ok := h.uid.guestID(uid); ok {
		uid = m.UID + g
	}
	if g, ok := h.gid.guestID(gid); ok {
		gid = m.GID + g
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
