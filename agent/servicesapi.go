package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/backup"
	"corpus/agent/services"
	"corpus/agent/volumes"
	corpusv1 "corpus/proto/corpus/v1"
)

// Services and backups on this node: the agent runs the services whose
// guests it hosts (agent/services), keeps the backups the cluster gave
// it (agent/backup), and serves the coordinators' backup and restore
// calls for both.

// newServices builds the node's service manager and backup store.
func (a *Agent) newServices() error {
	spool := filepath.Join(a.cfg.StateDir, "services", "spool")
	if err := os.MkdirAll(spool, 0o700); err != nil {
		return err
	}
	// Restores that died with the agent left their spools.
	if entries, err := os.ReadDir(spool); err == nil {
		for _, e := range entries {
			os.Remove(filepath.Join(spool, e.Name()))
		}
	}
	store, err := backup.Open(filepath.Join(a.cfg.StateDir, "backups"))
	if err != nil {
		return err
	}
	a.backups = store
	a.services = services.New(services.Config{Runtime: a.runtime, Logger: a.logger.With("component", "services"), SpoolDir: spool}, deployAgent{a})
	return nil
}

// reconcileServices runs the services of this node's guests and removes
// the backups the state no longer names.
func (a *Agent) reconcileServices(ctx context.Context) {
	a.mu.Lock()
	known := a.known
	svcs := maps.Clone(a.guestServices)
	guests := maps.Clone(a.desired)
	var keep map[string]bool
	if a.heldBackups != nil {
		keep = make(map[string]bool, len(a.heldBackups))
		for _, b := range a.heldBackups {
			keep[b.Id] = true
		}
	}
	a.mu.Unlock()
	if !known {
		return
	}
	a.services.Sync(ctx, svcs, guests)
	if keep == nil {
		keep = map[string]bool{}
	}
	// A transfer that has written nothing for this long died; a backup
	// the state has not named for this long is gone from it.
	removed, err := a.backups.Prune(keep, time.Now().Add(-time.Hour))
	if err != nil {
		a.logger.Warn("removing backups no longer kept", "error", err)
	}
	for _, id := range removed {
		a.logger.Info("removed a backup the cluster no longer keeps", "backup", id)
	}
}

// DumpService streams the dump of a service whose guest is on this node,
// or the backup of a volume here; the last message has its size and
// SHA-256.
func (s *agentAPI) DumpService(ctx context.Context, req *connect.Request[corpusv1.DumpServiceRequest], stream *connect.ServerStream[corpusv1.BackupChunk]) error {
	if err := s.a.checkCaller(req.Header()); err != nil {
		return err
	}
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
		size, sum, err = s.a.vols.Dump(ctx, bk.Volume, w)
	case bk.Service != "":
		size, sum, err = s.a.services.Dump(ctx, bk.Service, w)
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
	case errors.Is(err, services.ErrNotHere):
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
func (s *agentAPI) StoreBackup(ctx context.Context, stream *connect.ClientStream[corpusv1.BackupChunk]) (*connect.Response[corpusv1.StoreBackupResponse], error) {
	if err := s.a.checkCaller(stream.RequestHeader()); err != nil {
		return nil, err
	}
	if !stream.Receive() || stream.Msg().Backup == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the first message must name the backup"))
	}
	head := stream.Msg().Backup
	w, err := s.a.backups.Create(head.Id)
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
	s.a.logger.Info("keeping a backup", "backup", head.Id, "service", head.Service, "bytes", tail.SizeBytes)
	return connect.NewResponse(&corpusv1.StoreBackupResponse{SizeBytes: tail.SizeBytes, Sha256: tail.Sha256}), nil
}

// ReadBackup streams a kept backup once its checksum is verified.
func (s *agentAPI) ReadBackup(ctx context.Context, req *connect.Request[corpusv1.ReadBackupRequest], stream *connect.ServerStream[corpusv1.BackupChunk]) error {
	if err := s.a.checkCaller(req.Header()); err != nil {
		return err
	}
	bk := req.Msg.Backup
	if bk == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("no backup named"))
	}
	r, err := s.a.backups.Read(bk.Id, bk.SizeBytes, bk.Sha256)
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
func (s *agentAPI) LoadService(ctx context.Context, stream *connect.ClientStream[corpusv1.BackupChunk]) (*connect.Response[corpusv1.LoadServiceResponse], error) {
	if err := s.a.checkCaller(stream.RequestHeader()); err != nil {
		return nil, err
	}
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
		err = s.a.vols.Load(ctx, head.Volume, pr, head.SizeBytes, head.Sha256)
	case head.Service != "":
		out, err = s.a.services.Load(ctx, head.Service, pr, head.SizeBytes, head.Sha256)
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
func (s *agentAPI) RemoveBackup(ctx context.Context, req *connect.Request[corpusv1.RemoveBackupRequest]) (*connect.Response[corpusv1.RemoveBackupResponse], error) {
	if err := s.a.checkCaller(req.Header()); err != nil {
		return nil, err
	}
	if req.Msg.Backup == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no backup named"))
	}
	if err := s.a.backups.Remove(req.Msg.Backup.Id); err != nil {
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
