package backups

import (
	"context"

	"corpus/coordinator/api"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// Scheduled takes and removes the backups of the schedules
// (coordinator/backupschedule's Backups).
type Scheduled struct{ b *api.Backend }

// NewScheduled returns what the backup schedules take and remove
// backups through.
func NewScheduled(b *api.Backend) *Scheduled { return &Scheduled{b} }

// BackupService takes the scheduled backup of a service
// (coordinator/backupschedule's Backups).
func (s *Scheduled) BackupService(ctx context.Context, svc *corpusv1.Service) (*corpusv1.Backup, error) {
	bk, source, err := ServiceBackup(s.b.Store.Read(), svc, corpusv1.BackupSchedule)
	if err != nil {
		return nil, err
	}
	return runBackup(ctx, s.b, bk, source, func(*corpusv1.BackupProgress) error { return nil })
}

// BackupVolume takes the scheduled backup of a volume
// (coordinator/backupschedule's Backups).
func (s *Scheduled) BackupVolume(ctx context.Context, v *corpusv1.Volume) (*corpusv1.Backup, error) {
	bk, source, err := VolumeBackup(s.b.Store.Read(), v, corpusv1.BackupSchedule)
	if err != nil {
		return nil, err
	}
	return runBackup(ctx, s.b, bk, source, func(*corpusv1.BackupProgress) error { return nil })
}

// RemoveBackup removes a backup the schedule keeps no longer (see
// RemoveBackup).
func (s *Scheduled) RemoveBackup(ctx context.Context, bk *corpusv1.Backup) error {
	return RemoveBackup(ctx, s.b, bk)
}

// RemoveBackup removes a backup's file (now, when its holder answers;
// else when it next sees the backup gone) and forgets it.
func RemoveBackup(ctx context.Context, b *api.Backend, bk *corpusv1.Backup) error {
	view := b.Store.Read()
	if n := view.Node(bk.NodeId); n != nil && n.AgentAddress != "" && n.Status == state.NodeReady {
		if _, err := b.AgentClient(n).RemoveBackup(ctx, connect.NewRequest(&corpusv1.RemoveBackupRequest{Backup: bk})); err != nil {
			b.Logger.Warn("removing a backup's file", "backup", bk.Id, "node", n.Name, "error", err)
		}
	}
	_, err := b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_DeleteBackup{DeleteBackup: &corpusv1.DeleteBackup{Id: bk.Id}}})
	return err
}
