package volumes

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/api"
	"corpus/coordinator/api/backups"
	"corpus/coordinator/audit"
	"corpus/coordinator/auth"
	"corpus/coordinator/state"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// Volumes' backups go the services' way (a dump on the volume's node,
// kept on another, checked on both ends; the same schedules), with the
// volume's node writing a gzip'd tar of a snapshot of its files. A
// restore stops the volume's guest, swaps the files, and starts the guest
// again, also when the restore failed.

// guestStopTimeout bounds the wait for a guest to stop for a restore.
const guestStopTimeout = 2 * time.Minute

// pickVolume is the volume of that name.
func pickVolume(view *state.Snap, name string) (*corpusv1.Volume, error) {
	if err := names.Validate("volume", name); err != nil {
		return nil, api.ToConnect(err)
	}
	v := view.Volume(name)
	if v == nil {
		return nil, api.ToConnect(api.NotFound("volume", name, "corpus volume list"))
	}
	return v, nil
}

func (s *volumeService) BackupVolume(ctx context.Context, req *connect.Request[corpusv1.BackupVolumeRequest], stream *connect.ServerStream[corpusv1.BackupProgress]) error {
	view := s.b.Store.Read()
	v, err := pickVolume(view, req.Msg.Name)
	if err != nil {
		return err
	}
	bk, source, err := backups.VolumeBackup(view, v, corpusv1.BackupManual)
	return backups.BackupNow(ctx, s.b, bk, source, err, stream)
}

func (s *volumeService) RestoreVolume(ctx context.Context, req *connect.Request[corpusv1.RestoreVolumeRequest], stream *connect.ServerStream[corpusv1.BackupProgress]) error {
	m := req.Msg
	view := s.b.Store.Read()
	v, err := pickVolume(view, m.Name)
	if err != nil {
		return err
	}
	target, err := backups.VolumeNode(view, v)
	if err != nil {
		return err
	}
	bk, skipped, err := backups.RestoreSource(ctx, view, view.VolumeBackups(v.Name), "volume "+v.Name, "corpus volume backup "+v.Name, m.From)
	if err != nil {
		return err
	}
	if bk.Volume == "" {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("backup %s is of service %s: restore it with corpus service restore", bk.Id, bk.Service))
	}
	holder, err := backups.HolderOf(view, bk)
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("restoring volume %s on node %s from backup %s of %s", v.Name, target.Name, bk.Id, backups.BackupAge(bk, time.Now()))
	if bk.Volume != v.Name {
		msg += " (taken of volume " + bk.Volume + ")"
	}
	if skipped > 0 {
		msg += fmt.Sprintf(" (%d newer on nodes that are not ready)", skipped)
	}
	if err := stream.Send(&corpusv1.BackupProgress{Phase: "restoring", Backup: bk, Message: msg}); err != nil {
		return err
	}
	var out *corpusv1.LoadServiceResponse
	err = withGuestStopped(ctx, s.b, v.GuestId, stream.Send, func() error {
		head := proto.Clone(bk).(*corpusv1.Backup)
		head.Volume = v.Name
		var err error
		out, err = backups.RelayBackup(ctx, s.b, bk, holder, target, head, stream.Send)
		return err
	})
	result := "ok"
	if err != nil {
		result = "failed: " + audit.ErrorText(err)
	}
	if aerr := s.b.Audit().Record(ctx, auth.FromContext(ctx).String(), "restore", "volume "+v.Name+" from "+bk.Id, result); aerr != nil {
		s.b.Logger.Warn("recording a restore in the audit log", "volume", v.Name, "error", aerr)
	}
	if err != nil {
		return api.ToConnect(err)
	}
	return stream.Send(&corpusv1.BackupProgress{Phase: "done", DoneBytes: out.SizeBytes, Backup: bk})
}

// withGuestStopped runs f with guest id (when there is one and it is
// meant to run) stopped, and starts it again after, whatever f did.
func withGuestStopped(ctx context.Context, b *api.Backend, id string, progress func(*corpusv1.BackupProgress) error, f func() error) error {
	g := b.Store.Read().Guest(id)
	if g == nil || g.DesiredState != state.DesiredRunning {
		return f()
	}
	setDesired := func(ctx context.Context, desired string) error {
		_, err := b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetGuestDesired{SetGuestDesired: &corpusv1.SetGuestDesired{Name: g.Name, DesiredState: desired}}})
		return err
	}
	progress(&corpusv1.BackupProgress{Phase: "stopping", Message: "stopping guest " + g.Name + " for the restore"})
	if err := setDesired(ctx, state.DesiredStopped); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backups.WriteTimeout)
		defer cancel()
		if err := setDesired(sctx, state.DesiredRunning); err != nil {
			b.Logger.Error("starting a guest again after a restore", "guest", g.Name, "error", err)
			return
		}
		progress(&corpusv1.BackupProgress{Phase: "starting", Message: "guest " + g.Name + " started again"})
	}()
	wctx, cancel := context.WithTimeout(ctx, guestStopTimeout)
	defer cancel()
	for {
		view := b.Store.Read()
		view.WatchIndex()
		now := view.Guest(id)
		if now == nil {
			return connect.NewError(connect.CodeAborted, fmt.Errorf("guest %s was deleted meanwhile", g.Name))
		}
		if now.GetObserved().GetState() == state.ObservedStopped {
			break
		}
		if err := view.Wait(wctx); err != nil {
			return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("guest %s did not stop within %s: nothing restored", g.Name, guestStopTimeout))
		}
	}
	return f()
}

func (s *volumeService) UpdateVolume(ctx context.Context, req *connect.Request[corpusv1.UpdateVolumeRequest]) (*connect.Response[corpusv1.UpdateVolumeResponse], error) {
	m := req.Msg
	if _, _, err := backups.BackupPolicy("", 0, m.BackupSchedule, 0); err != nil {
		return nil, err
	}
	view := s.b.Store.Read()
	v, err := pickVolume(view, m.Name)
	if err != nil {
		return nil, err
	}
	schedule, keep, err := backups.BackupPolicy(v.BackupSchedule, v.BackupKeep, m.BackupSchedule, m.BackupKeep)
	if err != nil {
		return nil, err
	}
	if schedule == v.BackupSchedule && keep == v.BackupKeep {
		return connect.NewResponse(&corpusv1.UpdateVolumeResponse{Volume: volumeView(view, v)}), nil
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_UpdateVolume{UpdateVolume: &corpusv1.UpdateVolume{
		Name: v.Name, BackupSchedule: schedule, BackupKeep: keep,
	}}}); err != nil {
		return nil, err
	}
	view = s.b.Store.Read()
	return connect.NewResponse(&corpusv1.UpdateVolumeResponse{Volume: volumeView(view, view.Volume(v.Name)), Changed: true}), nil
}
