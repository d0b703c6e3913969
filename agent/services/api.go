package services

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/backup"
	"corpus/agent/volumes"
	corpusv1 "corpus/proto/corpus/v1"
)

// VolumeBackups backs up and restores the volumes of this node
// (agent/volumes).
type VolumeBackups interface {
	Dump(ctx context.Context, name string, w io.Writer) (int64, string, error)
	Load(ctx context.Context, name string, r io.Reader, size int64, sum string) error
}

// Node is the node's services and backups: Reconcile runs the services
// whose guests it hosts (Manager) and keeps the backups the cluster gave
// it (agent/backup); it serves the coordinators' backup and restore
// calls for both (the caller is checked before).
type Node struct {
	Services *Manager
	Backups  *backup.Store
	Volumes  VolumeBackups
	Logger   *slog.Logger
}

// Open builds the node's service manager, its restore spool and its
// backup store under stateDir; cfg.SpoolDir is set here.
func Open(stateDir string, cfg Config, a Agent) (*Manager, *backup.Store, error) {
	spool := filepath.Join(stateDir, "services", "spool")
	if err := os.MkdirAll(spool, 0o700); err != nil {
		return nil, nil, err
	}
	// Restores that died with the agent left their spools.
	if entries, err := os.ReadDir(spool); err == nil {
		for _, e := range entries {
			os.Remove(filepath.Join(spool, e.Name()))
		}
	}
	store, err := backup.Open(filepath.Join(stateDir, "backups"))
	if err != nil {
		return nil, nil, err
	}
	cfg.SpoolDir = spool
	return New(cfg, a), store, nil
}

// Reconcile runs the services of this node's guests (guest id to
// service name) and removes the backups held (what the state says this
// node keeps) does not name.
func (s Node) Reconcile(ctx context.Context, svcs map[string]string, guests map[string]*corpusv1.Guest, held []*corpusv1.Backup) {
	s.Services.Sync(ctx, svcs, guests)
	keep := map[string]bool{}
	for _, b := range held {
		keep[b.Id] = true
	}
	// A transfer that has written nothing for this long died; a backup
	// the state has not named for this long is gone from it.
	removed, err := s.Backups.Prune(keep, time.Now().Add(-time.Hour))
	if err != nil {
		s.Logger.Warn("removing backups no longer kept", "error", err)
	}
	for _, id := range removed {
		s.Logger.Info("removed a backup the cluster no longer keeps", "backup", id)
	}
}

// DumpService streams the dump of a service whose guest is on this node,
// or the backup of a volume here; the last message has its size and
// SHA-256.
func (s Node) DumpService(ctx context.Context, req *connect.Request[corpusv1.DumpServiceRequest], stream *connect.ServerStream[corpusv1.BackupChunk]) error {
	bk := req.Msg.Backup
	if bk == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("no backup named"))
	}
	w := backupWriter(stream.Send)
	var size int64
	var sum string
	var err error
	switch {
	case bk.Volume != "":
		size, sum, err = s.Volumes.Dump(ctx, bk.Volume, w)
	case bk.Service != "":
		size, sum, err = s.Services.Dump(ctx, bk.Service, w)
	default:
		err = errNoSubject
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return serviceError(err)
	}
	return stream.Send(&corpusv1.BackupChunk{Backup: &corpusv1.Backup{Id: bk.Id, Service: bk.Service, Volume: bk.Volume, SizeBytes: size, Sha256: sum}})
}

func serviceError(err error) error {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return ce
	case errors.Is(err, errNoSubject):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, ErrNotHere):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, backup.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, backup.ErrCorrupt):
		return connect.NewError(connect.CodeDataLoss, err)
	}
	return connect.NewError(connect.CodeUnknown, err)
}

// StoreBackup keeps a streamed backup: the first message names it, the
// last (a message with a backup again) gives the size and SHA-256 the
// data must have.
func (s Node) StoreBackup(ctx context.Context, stream *connect.ClientStream[corpusv1.BackupChunk]) (*connect.Response[corpusv1.StoreBackupResponse], error) {
	if !stream.Receive() || stream.Msg().Backup == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the first message must name the backup"))
	}
	head := stream.Msg().Backup
	w, err := s.Backups.Create(head.Id)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	var tail *corpusv1.Backup
	for stream.Receive() {
		m := stream.Msg()
		if m.Backup != nil {
			tail = m.Backup
		}
		if _, err := w.Write(m.Data); err != nil {
			w.Abort()
			return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("keeping backup %s: %w", head.Id, err))
		}
	}
	if err := stream.Err(); err != nil {
		w.Abort()
		return nil, err
	}
	if tail == nil {
		w.Abort()
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("backup %s ended without its size and checksum", head.Id))
	}
	if err := w.Commit(tail.SizeBytes, tail.Sha256); err != nil {
		return nil, serviceError(err)
	}
	s.Logger.Info("keeping a backup", "backup", head.Id, "service", head.Service, "bytes", tail.SizeBytes)
	return connect.NewResponse(&corpusv1.StoreBackupResponse{SizeBytes: tail.SizeBytes, Sha256: tail.Sha256}), nil
}

// ReadBackup streams a kept backup once its checksum is verified.
func (s Node) ReadBackup(ctx context.Context, req *connect.Request[corpusv1.ReadBackupRequest], stream *connect.ServerStream[corpusv1.BackupChunk]) error {
	bk := req.Msg.Backup
	if bk == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("no backup named"))
	}
	r, err := s.Backups.Read(bk.Id, bk.SizeBytes, bk.Sha256)
	if err != nil {
		return serviceError(err)
	}
	defer r.Close()
	w := backupWriter(stream.Send)
	if _, err := io.Copy(w, r); err != nil {
		return err
	}
	return w.Flush()
}

// backupWriter sends what is written to it as BackupChunks.
func backupWriter(send func(*corpusv1.BackupChunk) error) *volumes.ChunkWriter {
	return volumes.NewChunkWriter(func(data []byte, _ bool) error { return send(&corpusv1.BackupChunk{Data: data}) })
}

var errNoSubject = errors.New("the backup names neither a service nor a volume")

// LoadService restores a streamed backup into a service whose guest is on
// this node, or into a volume here.
func (s Node) LoadService(ctx context.Context, stream *connect.ClientStream[corpusv1.BackupChunk]) (*connect.Response[corpusv1.LoadServiceResponse], error) {
	if !stream.Receive() || stream.Msg().Backup == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the first message must name the backup"))
	}
	head := stream.Msg().Backup
	pr, pw := io.Pipe()
	go func() {
		for stream.Receive() {
			if _, err := pw.Write(stream.Msg().Data); err != nil {
				return
			}
		}
		pw.CloseWithError(stream.Err())
	}()
	var out string
	var err error
	switch {
	case head.Volume != "":
		err = s.Volumes.Load(ctx, head.Volume, pr, head.SizeBytes, head.Sha256)
	case head.Service != "":
		out, err = s.Services.Load(ctx, head.Service, pr, head.SizeBytes, head.Sha256)
	default:
		err = errNoSubject
	}
	pr.Close()
	if err != nil {
		return nil, serviceError(err)
	}
	return connect.NewResponse(&corpusv1.LoadServiceResponse{SizeBytes: head.SizeBytes, Output: lastLines(out, 20)}), nil
}

// RemoveBackup removes a kept backup's file.
func (s Node) RemoveBackup(ctx context.Context, req *connect.Request[corpusv1.RemoveBackupRequest]) (*connect.Response[corpusv1.RemoveBackupResponse], error) {
	if req.Msg.Backup == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no backup named"))
	}
	if err := s.Backups.Remove(req.Msg.Backup.Id); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	return connect.NewResponse(&corpusv1.RemoveBackupResponse{}), nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
