package volumes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"connectrpc.com/connect"

	"corpus/drivers"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/volume"
)

// Moving a volume between nodes: the coordinator streams the image out of
// the source agent (ExportVolume) into the target agent (ImportVolume) and
// records the move; the source agent then sees the volume among those that
// left it and removes its copy (Reconcile). Only unbound volumes
// move.

const chunkBytes = 1 << 20

// volumeBusy marks a volume as taken by a transfer, so the reconcile pass
// does not mount it meanwhile; it returns the release.
func (m *Manager) volumeBusy(name string) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.busy[name] {
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("volume %s is already being transferred", name))
	}
	m.busy[name] = true
	return func() {
		m.mu.Lock()
		delete(m.busy, name)
		m.mu.Unlock()
		m.cfg.Kick()
	}, nil
}

// Export streams the image of volume name, unbound, to send in chunks;
// the first says the image's size.
func (m *Manager) Export(ctx context.Context, name string, send func(*corpusv1.VolumeChunk) error) error {
	if err := names.Validate("volume", name); err != nil || m.backend == nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("volume %q cannot be exported here", name))
	}
	for _, v := range m.desiredVolumes() {
		if v.Name == name && v.GuestId != "" {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("volume %s is used by guest %s", name, v.GuestName))
		}
	}
	release, err := m.volumeBusy(name)
	if err != nil {
		return err
	}
	defer release()
	info, err := m.backend.Stat(ctx, name)
	if err != nil {
		return connect.NewError(connect.CodeNotFound, err)
	}
	if err := m.backend.Unmount(ctx, name); err != nil {
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	mover, ok := m.backend.(volume.Mover)
	if !ok {
		return connect.NewError(connect.CodeUnimplemented, errors.New("this node's volume backend cannot export"))
	}
	w := &ChunkWriter{emit: func(data []byte, first bool) error {
		c := &corpusv1.VolumeChunk{Data: data}
		if first {
			c.TotalBytes = info.SizeBytes
		}
		return send(c)
	}}
	if err := mover.Export(ctx, name, w, nil); err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("exporting volume %s: %w", name, err))
	}
	return w.Flush()
}

// ChunkWriter cuts a stream (a volume's export, a backup) into messages
// of chunkBytes, which emit sends; Flush sends the rest (and one message,
// empty, when nothing was written).
type ChunkWriter struct {
	emit func(data []byte, first bool) error
	buf  []byte
	sent bool
}

// NewChunkWriter returns a writer that hands emit its chunks; first is
// true for the first one.
func NewChunkWriter(emit func(data []byte, first bool) error) *ChunkWriter {
	return &ChunkWriter{emit: emit}
}

func (w *ChunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		take := min(len(p), chunkBytes-len(w.buf))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if len(w.buf) == chunkBytes {
			if err := w.Flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *ChunkWriter) Flush() error {
	if len(w.buf) == 0 && w.sent {
		return nil
	}
	first := !w.sent
	w.sent = true
	err := w.emit(w.buf, first)
	w.buf = nil
	return err
}

// Import makes a volume of the image stream carries; its first chunk
// names the volume and says the image's size.
func (m *Manager) Import(ctx context.Context, stream *connect.ClientStream[corpusv1.VolumeChunk]) (*corpusv1.ImportVolumeResponse, error) {
	if !stream.Receive() {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("empty volume stream"))
	}
	first := stream.Msg()
	if err := names.Validate("volume", first.Name); err != nil || m.backend == nil || first.TotalBytes <= 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("volume %q of %d bytes cannot be imported here", first.Name, first.TotalBytes))
	}
	mover, ok := m.backend.(volume.Mover)
	if !ok {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this node's volume backend cannot import"))
	}
	release, err := m.volumeBusy(first.Name)
	if err != nil {
		return nil, err
	}
	defer release()
	pr, pw := io.Pipe()
	go func() {
		_, err := pw.Write(first.Data)
		for err == nil && stream.Receive() {
			_, err = pw.Write(stream.Msg().Data)
		}
		if err == nil {
			err = stream.Err()
		}
		pw.CloseWithError(err) // nil: EOF
	}()
	var got int64
	err = mover.Import(ctx, first.Name, pr, first.TotalBytes, func(done, _ int64) { got = done })
	pr.CloseWithError(err)
	if err != nil {
		code := connect.CodeInternal
		if errors.Is(err, volume.ErrExists) {
			code = connect.CodeAlreadyExists
		}
		return nil, connect.NewError(code, fmt.Errorf("importing volume %s: %w", first.Name, err))
	}
	m.logger.Info("volume imported", "volume", first.Name, "bytes", got)
	return &corpusv1.ImportVolumeResponse{Bytes: got}, nil
}

func (m *Manager) desiredVolumes() []*corpusv1.Volume {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*corpusv1.Volume(nil), m.volumes...)
}

// Snapshot copies volume name consistently to a file under the state
// folder and says where.
func (m *Manager) Snapshot(ctx context.Context, name string) (*corpusv1.SnapshotVolumeResponse, error) {
	dest := filepath.Join(m.cfg.StateDir, "volumes", "snapshots", name+"-"+time.Now().UTC().Format("20060102T150405.000Z")+".img")
	size, err := m.snapshotVolume(ctx, name, dest)
	if err != nil {
		return nil, err
	}
	return &corpusv1.SnapshotVolumeResponse{Path: dest, SizeBytes: size}, nil
}

// snapshotVolume copies a volume of this node consistently to dest (see
// volume.Snapshotter); a running VM's disk is refused.
func (m *Manager) snapshotVolume(ctx context.Context, name, dest string) (int64, error) {
	if err := names.Validate("volume", name); err != nil || m.backend == nil {
		return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("volume %q cannot be copied here", name))
	}
	snap, ok := m.backend.(volume.Snapshotter)
	if !ok {
		return 0, connect.NewError(connect.CodeUnimplemented, errors.New("this node's volume backend cannot snapshot"))
	}
	for _, v := range m.desiredVolumes() {
		if v.Name != name {
			continue
		}
		// The host cannot freeze a file system a VM has mounted.
		if g, d := m.blockGuest(v); g != nil {
			if st, err := d.Inspect(ctx, g.Name); err == nil && st.State != drivers.StateStopped {
				return 0, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("volume %s is a disk of guest %s, which is %s: a running VM's volume cannot be copied consistently from the host; stop the guest (`corpus guest stop %s`) first", name, g.Name, st.State, g.Name))
			}
		}
	}
	size, err := snap.Snapshot(ctx, name, dest)
	if err != nil {
		code := connect.CodeInternal
		if errors.Is(err, volume.ErrNotFound) {
			code = connect.CodeNotFound
		}
		return 0, connect.NewError(code, err)
	}
	return size, nil
}
