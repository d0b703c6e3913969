package agent

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
// left it and removes its copy (reconcileVolumes). Only unbound volumes
// move.

const chunkBytes = 1 << 20

// volumeBusy marks a volume as taken by a transfer, so the reconcile pass
// does not mount it meanwhile; it returns the release.
func (a *Agent) volumeBusy(name string) (func(), error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.volBusy[name] {
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("volume %s is already being transferred", name))
	}
	a.volBusy[name] = true
	return func() {
		a.mu.Lock()
		delete(a.volBusy, name)
		a.mu.Unlock()
		a.poke(a.kick)
	}, nil
}

func (s *agentAPI) ExportVolume(ctx context.Context, req *connect.Request[corpusv1.ExportVolumeRequest], stream *connect.ServerStream[corpusv1.VolumeChunk]) error {
	a := s.a
	if err := a.checkCaller(req.Header()); err != nil {
		return err
	}
	name := req.Msg.Name
	if err := names.Validate("volume", name); err != nil || a.vols == nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("volume %q cannot be exported here", name))
	}
	for _, v := range a.desiredVolumes() {
		if v.Name == name && v.GuestId != "" {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("volume %s is used by guest %s", name, v.GuestName))
		}
	}
	release, err := a.volumeBusy(name)
	if err != nil {
		return err
	}
	defer release()
	info, err := a.vols.Stat(ctx, name)
	if err != nil {
		return connect.NewError(connect.CodeNotFound, err)
	}
	if err := a.vols.Unmount(ctx, name); err != nil {
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	mover, ok := a.vols.(volume.Mover)
	if !ok {
		return connect.NewError(connect.CodeUnimplemented, errors.New("this node's volume backend cannot export"))
	}
	w := &chunkWriter{emit: func(data []byte, first bool) error {
		c := &corpusv1.VolumeChunk{Data: data}
		if first {
			c.TotalBytes = info.SizeBytes
		}
		return stream.Send(c)
	}}
	if err := mover.Export(ctx, name, w, nil); err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("exporting volume %s: %w", name, err))
	}
	return w.flush()
}

// chunkWriter cuts a stream (a volume's export, a backup) into messages
// of chunkBytes, which emit sends; flush sends the rest (and one message,
// empty, when nothing was written).
type chunkWriter struct {
	emit func(data []byte, first bool) error
	buf  []byte
	sent bool
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		take := min(len(p), chunkBytes-len(w.buf))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if len(w.buf) == chunkBytes {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 && w.sent {
		return nil
	}
	first := !w.sent
	w.sent = true
	err := w.emit(w.buf, first)
	w.buf = nil
	return err
}

func (s *agentAPI) ImportVolume(ctx context.Context, stream *connect.ClientStream[corpusv1.VolumeChunk]) (*connect.Response[corpusv1.ImportVolumeResponse], error) {
	a := s.a
	if err := a.checkCaller(stream.RequestHeader()); err != nil {
		return nil, err
	}
	if !stream.Receive() {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("empty volume stream"))
	}
	first := stream.Msg()
	if err := names.Validate("volume", first.Name); err != nil || a.vols == nil || first.TotalBytes <= 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("volume %q of %d bytes cannot be imported here", first.Name, first.TotalBytes))
	}
	mover, ok := a.vols.(volume.Mover)
	if !ok {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this node's volume backend cannot import"))
	}
	release, err := a.volumeBusy(first.Name)
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
	a.logger.Info("volume imported", "volume", first.Name, "bytes", got)
	return connect.NewResponse(&corpusv1.ImportVolumeResponse{Bytes: got}), nil
}

func (a *Agent) desiredVolumes() []*corpusv1.Volume {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*corpusv1.Volume(nil), a.volumes...)
}

func (s *agentAPI) SnapshotVolume(ctx context.Context, req *connect.Request[corpusv1.SnapshotVolumeRequest]) (*connect.Response[corpusv1.SnapshotVolumeResponse], error) {
	if err := s.a.checkCaller(req.Header()); err != nil {
		return nil, err
	}
	name := req.Msg.Name
	dest := filepath.Join(s.a.cfg.StateDir, "volumes", "snapshots", name+"-"+time.Now().UTC().Format("20060102T150405.000Z")+".img")
	size, err := s.a.snapshotVolume(ctx, name, dest)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.SnapshotVolumeResponse{Path: dest, SizeBytes: size}), nil
}

// snapshotVolume copies a volume of this node consistently to dest (see
// volume.Snapshotter); a running VM's disk is refused.
func (a *Agent) snapshotVolume(ctx context.Context, name, dest string) (int64, error) {
	if err := names.Validate("volume", name); err != nil || a.vols == nil {
		return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("volume %q cannot be copied here", name))
	}
	snap, ok := a.vols.(volume.Snapshotter)
	if !ok {
		return 0, connect.NewError(connect.CodeUnimplemented, errors.New("this node's volume backend cannot snapshot"))
	}
	for _, v := range a.desiredVolumes() {
		if v.Name != name {
			continue
		}
		// The host cannot freeze a file system a VM has mounted.
		if g, d := a.blockGuest(v); g != nil {
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
