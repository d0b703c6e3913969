package backup

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// A volume's backup is a gzip'd tar of its files, made by GNU tar (numeric
// owners, ACLs, extended attributes, sparse files) from a read-only
// snapshot, so its files are as they were at one instant.

// Folders of a volume's top that a restore uses beside its files; a
// restore that died leaves them, and the next one removes them first.
const (
	restoreNew = ".corpus-restore-new"
	restoreOld = ".corpus-restore-old"
)

// tarFlags keep what a volume's files are, beyond their bytes.
var tarFlags = []string{"--numeric-owner", "--acls", "--xattrs", "--xattrs-include=*"}

// Archive writes the files under dir to w, a gzip'd tar.
func Archive(ctx context.Context, dir string, w io.Writer) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	args := append([]string{"--create", "--sparse", "--directory", dir, "--file", "-"}, tarFlags...)
	if err := runTar(ctx, append(args, "."), nil, zw); err != nil {
		return fmt.Errorf("archiving %s: %w", dir, err)
	}
	return zw.Close()
}

// Extract replaces the files under dir with those of an archive Archive
// wrote. It extracts beside them first, so a bad archive or a volume
// without room for both leaves them as they were; then it swaps them
// (renames on one file system) and removes the old ones. lost+found
// stays.
func Extract(ctx context.Context, dir string, r io.Reader) error {
	in, old := filepath.Join(dir, restoreNew), filepath.Join(dir, restoreOld)
	for _, p := range []string{in, old} {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	if err := os.Mkdir(in, 0o700); err != nil {
		return err
	}
	zr, err := gzip.NewReader(r)
	if err != nil {
		os.RemoveAll(in)
		return fmt.Errorf("the backup is not a gzip'd tar: %w", err)
	}
	args := append([]string{"--extract", "--same-permissions", "--directory", in, "--file", "-"}, tarFlags...)
	if err := runTar(ctx, args, zr, nil); err != nil {
		os.RemoveAll(in)
		if errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "No space left") {
			return fmt.Errorf("the volume has no room for the backup beside its files (a restore needs both until it swaps them): grow it first: %w", err)
		}
		return fmt.Errorf("extracting the backup: %w", err)
	}
	if err := os.Mkdir(old, 0o700); err != nil {
		os.RemoveAll(in)
		return err
	}
	if err := moveEntries(dir, old); err != nil {
		return fmt.Errorf("setting the old files aside (in %s): %w", old, err)
	}
	if err := moveEntries(in, dir); err != nil {
		return fmt.Errorf("moving the restored files in (from %s; the old ones are in %s): %w", in, old, err)
	}
	// The top folder's own owner and mode, as archived.
	if st, err := os.Lstat(in); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			os.Lchown(dir, int(sys.Uid), int(sys.Gid))
		}
		os.Chmod(dir, st.Mode().Perm())
	}
	return errors.Join(os.RemoveAll(in), os.RemoveAll(old))
}

// moveEntries renames the entries of from into to, but for lost+found
// and a restore's own folders.
func moveEntries(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if name == "lost+found" || strings.HasPrefix(name, restoreNew) || strings.HasPrefix(name, restoreOld) {
			continue
		}
		if err := os.Rename(filepath.Join(from, name), filepath.Join(to, name)); err != nil {
			return err
		}
	}
	return nil
}

// runTar runs GNU tar; its error carries what it said last.
func runTar(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	cmd := exec.CommandContext(ctx, "tar", args...)
	cmd.Stdin, cmd.Stdout = stdin, stdout
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		return fmt.Errorf("tar: %w: %s", err, msg)
	}
	return nil
}
