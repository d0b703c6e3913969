package volumes

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/backup"
	corpusv1 "corpus/proto/corpus/v1"
)

// Volumes' backups: the files of a snapshot (the volume's file system
// frozen only while its image is copied here, sparsely), read from the
// snapshot mounted read-only, as a gzip'd tar; a restore extracts one
// beside the volume's files and swaps them (agent/backup). The
// coordinator stops the volume's guest around a restore.

// Dump writes the backup of a volume of this node to w and returns
// its size and SHA-256.
func (m *Manager) Dump(ctx context.Context, name string, w io.Writer) (int64, string, error) {
	if m.volumeHere(name) == nil {
		return 0, "", connect.NewError(connect.CodeNotFound, fmt.Errorf("volume %s is not on this node", name))
	}
	start := time.Now()
	dir := filepath.Join(m.cfg.StateDir, "volumes", "snapshots", "backup-"+name+"-"+start.UTC().Format("20060102T150405.000Z"))
	img := dir + ".img"
	if _, err := m.snapshotVolume(ctx, name, img); err != nil {
		return 0, "", err
	}
	defer os.Remove(img)
	froze := time.Since(start)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, "", err
	}
	defer os.Remove(dir)
	if out, err := exec.CommandContext(ctx, "mount", "-o", "loop,ro,noload,nodev,nosuid,noexec", img, dir).CombinedOutput(); err != nil {
		return 0, "", fmt.Errorf("mounting the snapshot of %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	defer func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			m.logger.Warn("unmounting a volume's snapshot", "volume", name, "dir", dir, "error", err, "output", string(out))
		}
	}()
	c := backup.NewCounter(w)
	if err := backup.Archive(ctx, dir, c); err != nil {
		return 0, "", err
	}
	m.logger.Info("volume backed up", "volume", name, "bytes", c.Size(), "snapshot", froze.Round(time.Millisecond), "duration", time.Since(start).Round(time.Millisecond))
	return c.Size(), c.Sum(), nil
}

// Load replaces the files of a volume of this node with a backup's
// once all of it arrived and matches size and sum.
func (m *Manager) Load(ctx context.Context, name string, r io.Reader, size int64, sum string) error {
	v := m.volumeHere(name)
	if v == nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("volume %s is not on this node", name))
	}
	if !m.hostMayMount(v) {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("volume %s is a VM's disk: its files are restored from inside the guest", name))
	}
	spool, err := backup.Spool(filepath.Join(m.cfg.StateDir, "services", "spool"), r, size, sum)
	if err != nil {
		return err
	}
	defer spool.Close()
	defer m.lockVolume(name)()
	target, err := m.mountVolume(ctx, v)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := backup.Extract(ctx, target, spool); err != nil {
		return fmt.Errorf("restoring volume %s: %w", name, err)
	}
	m.logger.Info("volume restored", "volume", name, "bytes", size, "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// volumeHere is the volume of that name this node keeps, as last told.
func (m *Manager) volumeHere(name string) *corpusv1.Volume {
	for _, v := range m.desiredVolumes() {
		if v.Name == name && v.NodeId == m.nodeID() && v.DesiredState != corpusv1.VolumeDeleted {
			return v
		}
	}
	return nil
}
