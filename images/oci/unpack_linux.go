//go:build linux

package oci

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// applyBlob applies the layer stored in blob (a tar, gzip- or
// zstd-compressed or not) to the tree at root, and checks that its
// uncompressed bytes have digest diffID.
func applyBlob(root, blob string, diffID v1.Hash, log *slog.Logger) error {
	f, err := os.Open(blob)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	magic, _ := br.Peek(4)
	var r io.Reader = br
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer zr.Close()
		r = zr
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return err
		}
		defer zr.Close()
		r = zr
	}
	sum := sha256.New()
	if err := applyLayer(root, io.TeeReader(r, sum), log); err != nil {
		return err
	}
	// The tar's end may be followed by padding the digest covers.
	if _, err := io.Copy(sum, r); err != nil {
		return err
	}
	if got := hex.EncodeToString(sum.Sum(nil)); diffID.Algorithm != "sha256" || got != diffID.Hex {
		return fmt.Errorf("%w: uncompressed layer has sha256:%s, its config says %s", ErrDigestMismatch, got, diffID)
	}
	return nil
}

// unpacker applies one layer's tar to a tree. Every path is resolved
// under the tree's root with openat2's RESOLVE_IN_ROOT, so a symlink
// (absolute or with "..") can never lead out of it, and every change is
// made through a file descriptor of the entry's parent folder.
type unpacker struct {
	root int // O_PATH descriptor of the tree's root
	log  *slog.Logger
	// written holds the paths this layer made and their parents: an
	// opaque folder's whiteout removes everything else below it.
	written map[string]bool
	dirs    []*tar.Header // folders, whose times are set at the end
}

// applyLayer applies the tar read from r to the tree at root.
func applyLayer(root string, r io.Reader, log *slog.Logger) error {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", root, err)
	}
	u := &unpacker{root: fd, log: log, written: map[string]bool{".": true}}
	defer unix.Close(fd)
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the layer: %w", err)
		}
		if err := u.entry(hdr, tr); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
	}
	for _, hdr := range u.dirs {
		u.setTimes(clean(hdr.Name), hdr)
	}
	return nil
}

// clean is an entry's path relative to the tree's root: "." for the
// root, never starting with "/" or "..".
func clean(name string) string {
	p := strings.TrimPrefix(path.Clean("/"+name), "/")
	if p == "" {
		return "."
	}
	return p
}

const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// open opens rel inside the tree.
func (u *unpacker) open(rel string, flags uint64) (int, error) {
	for {
		fd, err := unix.Openat2(u.root, rel, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: resolveFlags})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// dir opens folder rel of the tree, making it and its missing parents
// (root's, 0755) when needed.
func (u *unpacker) dir(rel string) (int, error) {
	fd, err := u.open(rel, unix.O_DIRECTORY|unix.O_RDONLY)
	if err == nil || err != unix.ENOENT || rel == "." {
		return fd, err
	}
	parent, err := u.dir(path.Dir(rel))
	if err != nil {
		return -1, err
	}
	err = unix.Mkdirat(parent, path.Base(rel), 0o755)
	unix.Close(parent)
	if err != nil && err != unix.EEXIST {
		return -1, err
	}
	u.mark(rel)
	return u.open(rel, unix.O_DIRECTORY|unix.O_RDONLY)
}

// mark records rel and its parents as made by this layer.
func (u *unpacker) mark(rel string) {
	for p := rel; !u.written[p]; p = path.Dir(p) {
		u.written[p] = true
	}
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	rel := clean(hdr.Name)
	if rel == "." {
		return nil // the root keeps the tree's owner and mode
	}
	parentRel, base := path.Split(rel)
	parentRel = clean(parentRel)
	if base == ".wh..wh..opq" {
		fd, err := u.dir(parentRel)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return u.clearOpaque(fd, parentRel)
	}
	if name, ok := strings.CutPrefix(base, ".wh."); ok {
		fd, err := u.open(parentRel, unix.O_DIRECTORY|unix.O_RDONLY)
		if err == unix.ENOENT || err == unix.ENOTDIR {
			return nil // nothing to hide
		}
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return removeAllAt(fd, name)
	}
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock:
		u.log.Warn("skipping a device node in an image layer", "path", rel, "major", hdr.Devmajor, "minor", hdr.Devminor)
		return nil
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
	default:
		u.log.Warn("skipping an entry of unknown type in an image layer", "path", rel, "type", string(hdr.Typeflag))
		return nil
	}

	parent, err := u.dir(parentRel)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	var st unix.Stat_t
	if err := unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		if !(hdr.Typeflag == tar.TypeDir && st.Mode&unix.S_IFMT == unix.S_IFDIR) {
			if err := removeAllAt(parent, base); err != nil {
				return err
			}
		}
	} else if err != unix.ENOENT {
		return err
	}
	u.mark(rel)
	mode := uint32(hdr.Mode) & 0o7777
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(parent, base, 0o700); err != nil && err != unix.EEXIST {
			return err
		}
		fd, err := unix.Openat(parent, base, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		u.dirs = append(u.dirs, hdr)
		return u.own(fd, hdr, mode)
	case tar.TypeReg:
		fd, err := unix.Openat(parent, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), rel)
		defer f.Close()
		if _, err := io.Copy(f, r); err != nil {
			return err
		}
		if err := u.own(fd, hdr, mode); err != nil {
			return err
		}
		return unix.UtimesNanoAt(parent, base, times(hdr), unix.AT_SYMLINK_NOFOLLOW)
	case tar.TypeSymlink:
		if err := unix.Symlinkat(hdr.Linkname, parent, base); err != nil {
			return err
		}
		if err := unix.Fchownat(parent, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		return unix.UtimesNanoAt(parent, base, times(hdr), unix.AT_SYMLINK_NOFOLLOW)
	case tar.TypeLink:
		target := clean(hdr.Linkname)
		tdir, tbase := path.Split(target)
		tparent, err := u.open(clean(tdir), unix.O_DIRECTORY|unix.O_RDONLY)
		if err != nil {
			return fmt.Errorf("hard link to %s: %w", hdr.Linkname, err)
		}
		defer unix.Close(tparent)
		if err := unix.Linkat(tparent, tbase, parent, base, 0); err != nil {
			return fmt.Errorf("hard link to %s: %w", hdr.Linkname, err)
		}
		return nil
	case tar.TypeFifo:
		if err := unix.Mknodat(parent, base, unix.S_IFIFO|0o600, 0); err != nil {
			return err
		}
		if err := unix.Fchownat(parent, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		return unix.Fchmodat(parent, base, mode, 0)
	}
	return nil
}

// own gives the open file fd the entry's owner, then its mode (a chown
// clears set-id bits), then its xattrs.
func (u *unpacker) own(fd int, hdr *tar.Header, mode uint32) error {
	if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return err
	}
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok {
			continue
		}
		// trusted.* (overlayfs' own, among others) and other security.*
		// xattrs would act on the host, not in the guest.
		if !strings.HasPrefix(name, "user.") && name != "security.capability" {
			u.log.Warn("skipping an xattr in an image layer", "path", hdr.Name, "xattr", name)
			continue
		}
		if err := unix.Fsetxattr(fd, name, []byte(v), 0); err != nil {
			return fmt.Errorf("setting xattr %s: %w", name, err)
		}
	}
	return nil
}

func times(hdr *tar.Header) []unix.Timespec {
	at := hdr.AccessTime
	if at.IsZero() {
		at = hdr.ModTime
	}
	return []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
}

// setTimes sets folder rel's times once its children are in place; a
// folder a later entry replaced is left as it is.
func (u *unpacker) setTimes(rel string, hdr *tar.Header) {
	parentRel, base := path.Split(rel)
	parent, err := u.open(clean(parentRel), unix.O_DIRECTORY|unix.O_RDONLY)
	if err != nil {
		return
	}
	defer unix.Close(parent)
	if err := unix.UtimesNanoAt(parent, base, times(hdr), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		u.log.Debug("setting a folder's times", "path", rel, "error", err)
	}
}

// clearOpaque removes what lower layers put in folder fd (rel in the
// tree): everything this layer did not make.
func (u *unpacker) clearOpaque(fd int, rel string) error {
	names, err := readNames(fd)
	if err != nil {
		return err
	}
	for _, name := range names {
		child := path.Join(rel, name)
		if rel == "." {
			child = name
		}
		if !u.written[child] {
			if err := removeAllAt(fd, name); err != nil {
				return err
			}
			continue
		}
		sub, err := unix.Openat(fd, name, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOTDIR || err == unix.ELOOP {
			continue
		}
		if err != nil {
			return err
		}
		err = u.clearOpaque(sub, child)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

// readNames lists folder fd without closing it.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), ".")
	defer f.Close()
	return f.Readdirnames(-1)
}

// removeAllAt removes name in folder dirfd and, for a folder, all below
// it, never following a symlink. A missing name is not an error.
func removeAllAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	names, err := readNames(fd)
	if err == nil {
		for _, n := range names {
			if err = removeAllAt(fd, n); err != nil {
				break
			}
		}
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// openInTree opens file rel of the tree at root for reading, resolving
// symlinks as the tree's own root would (RESOLVE_IN_ROOT).
func openInTree(root, rel string) (*os.File, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	u := &unpacker{root: fd}
	f, err := u.open(clean(rel), unix.O_RDONLY)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: rel, Err: err}
	}
	return os.NewFile(uintptr(f), rel), nil
}
