package api

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// Scheduled backups: the leader takes each service's backup when its
// schedule says one is due, one service at a time, and removes the
// scheduled backups beyond the number the service keeps (manual and
// imported ones stay until someone deletes them).

// DefaultBackupKeep is how many scheduled backups a service keeps when
// it does not say.
const DefaultBackupKeep = 7

// backupCheckEvery is how often the leader looks for due backups; a
// failed one is tried again after backupRetry.
const (
	backupCheckEvery = time.Minute
	backupRetry      = 10 * time.Minute
)

// schedulePeriod is the time between a schedule's backups.
func schedulePeriod(s string) time.Duration {
	switch s {
	case corpusv1.ScheduleHourly:
		return time.Hour
	case corpusv1.ScheduleDaily:
		return 24 * time.Hour
	case corpusv1.ScheduleWeekly:
		return 7 * 24 * time.Hour
	}
	return 0
}

// dueBackups are the services whose scheduled backup is due at now: the
// newest backup that succeeded (of any trigger) is older than the
// schedule's period, and none of theirs is running.
func dueBackups(view *state.Snap, now time.Time) []*corpusv1.Service {
	var out []*corpusv1.Service
	for _, svc := range view.Services() {
		period := schedulePeriod(svc.BackupSchedule)
		if period == 0 || svc.GuestId == "" || svc.DesiredState != state.DesiredRunning {
			continue
		}
		due := true
		for _, b := range view.Backups(svc.Name) {
			if b.Status == corpusv1.BackupRunning {
				due = false
				break
			}
			if b.Status == corpusv1.BackupSucceeded {
				due = now.Sub(b.FinishedAt.AsTime()) >= period
				break
			}
		}
		if due {
			out = append(out, svc)
		}
	}
	return out
}

// expiredBackups are the scheduled backups beyond what each service
// keeps, oldest last: those that succeeded past the keep newest, and
// those that failed once a newer one succeeded.
func expiredBackups(view *state.Snap) []*corpusv1.Backup {
	var out []*corpusv1.Backup
	for _, svc := range view.Services() {
		keep := int(svc.BackupKeep)
		if keep == 0 {
			keep = DefaultBackupKeep
		}
		kept, succeeded := 0, false
		for _, b := range view.Backups(svc.Name) { // newest first
			if b.Trigger != corpusv1.BackupSchedule {
				continue
			}
			switch b.Status {
			case corpusv1.BackupSucceeded:
				kept++
				succeeded = true
				if kept > keep {
					out = append(out, b)
				}
			case corpusv1.BackupFailed:
				if succeeded {
					out = append(out, b)
				}
			}
		}
	}
	return out
}

// BackupLoop takes the scheduled backups while ctx lasts; the leader
// runs it.
func (b *Backend) BackupLoop(ctx context.Context) {
	failed := map[string]time.Time{} // service: when its last try failed
	t := time.NewTicker(backupCheckEvery)
	defer t.Stop()
	for {
		now := time.Now()
		for _, svc := range dueBackups(b.Store.Read(), now) {
			if at, ok := failed[svc.Name]; ok && now.Sub(at) < backupRetry {
				continue
			}
			bk, err := b.runBackup(ctx, svc, corpusv1.BackupSchedule, func(*corpusv1.BackupProgress) error { return nil })
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				failed[svc.Name] = time.Now()
				b.Logger.Warn("scheduled backup failed", "service", svc.Name, "error", err, "retry_in", backupRetry)
				continue
			}
			delete(failed, svc.Name)
			b.Logger.Info("scheduled backup taken", "service", svc.Name, "backup", bk.Id, "bytes", bk.SizeBytes)
		}
		for _, bk := range expiredBackups(b.Store.Read()) {
			if err := b.removeBackup(ctx, bk); err != nil {
				b.Logger.Warn("removing an expired backup", "service", bk.Service, "backup", bk.Id, "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// removeBackup removes a backup's file (now, when its holder answers;
// else when it next sees the backup gone) and forgets it.
func (b *Backend) removeBackup(ctx context.Context, bk *corpusv1.Backup) error {
	view := b.Store.Read()
	if n := view.Node(bk.NodeId); n != nil && n.AgentAddress != "" && n.Status == state.NodeReady {
		if _, err := b.AgentClient(n).RemoveBackup(ctx, connect.NewRequest(&corpusv1.RemoveBackupRequest{Backup: bk})); err != nil {
			b.Logger.Warn("removing a backup's file", "backup", bk.Id, "node", n.Name, "error", err)
		}
	}
	_, err := b.write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_DeleteBackup{DeleteBackup: &corpusv1.DeleteBackup{Id: bk.Id}}})
	return err
}
