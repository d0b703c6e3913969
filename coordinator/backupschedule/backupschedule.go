// Package backupschedule takes the scheduled backups: the leader takes
// each service's and volume's backup when its schedule says one is due,
// one at a time, and removes the scheduled backups beyond the number each
// keeps (manual and imported ones stay until someone deletes them).
package backupschedule

import (
	"context"
	"log/slog"
	"time"

	"corpus/coordinator/state"
	"corpus/internal/clock"
	corpusv1 "corpus/proto/corpus/v1"
)

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

// backupSubject is what scheduled backups are taken of: a service or a
// volume with a schedule.
type backupSubject struct {
	service *corpusv1.Service
	volume  *corpusv1.Volume
}

func (s backupSubject) String() string {
	if s.service != nil {
		return "service " + s.service.Name
	}
	return "volume " + s.volume.Name
}

// policy is the subject's schedule and how many scheduled backups it keeps.
func (s backupSubject) policy() (schedule string, keep int) {
	if s.service != nil {
		schedule, keep = s.service.BackupSchedule, int(s.service.BackupKeep)
	} else {
		schedule, keep = s.volume.BackupSchedule, int(s.volume.BackupKeep)
	}
	if keep == 0 {
		keep = corpusv1.DefaultBackupKeep
	}
	return schedule, keep
}

// backups are the subject's backups, newest first.
func (s backupSubject) backups(view *state.Snap) []*corpusv1.Backup {
	if s.service != nil {
		return view.Backups(s.service.Name)
	}
	return view.VolumeBackups(s.volume.Name)
}

// active says whether a backup of the subject can be taken: a service
// meant to run in a guest, a volume that is on a node and not being
// deleted.
func (s backupSubject) active() bool {
	if s.service != nil {
		return s.service.GuestId != "" && s.service.DesiredState == state.DesiredRunning
	}
	return s.volume.NodeId != "" && s.volume.DesiredState != state.VolumeDeleted
}

// subjects are the services and the volumes with a backup schedule.
func subjects(view *state.Snap) []backupSubject {
	var out []backupSubject
	for _, svc := range view.Services() {
		out = append(out, backupSubject{service: svc})
	}
	for _, v := range view.Volumes() {
		if v.BackupSchedule != "" {
			out = append(out, backupSubject{volume: v})
		}
	}
	return out
}

// dueBackups are the subjects whose scheduled backup is due at now: the
// newest backup that succeeded (of any trigger) is older than the
// schedule's period, and none of theirs is running.
func dueBackups(view *state.Snap, now time.Time) []backupSubject {
	var out []backupSubject
	for _, sub := range subjects(view) {
		schedule, _ := sub.policy()
		period := schedulePeriod(schedule)
		if period == 0 || !sub.active() {
			continue
		}
		due := true
		for _, b := range sub.backups(view) {
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
			out = append(out, sub)
		}
	}
	return out
}

// expiredBackups are the scheduled backups beyond what each subject
// keeps, oldest last: those that succeeded past the keep newest, and
// those that failed once a newer one succeeded.
func expiredBackups(view *state.Snap) []*corpusv1.Backup {
	var out []*corpusv1.Backup
	for _, sub := range subjects(view) {
		_, keep := sub.policy()
		kept, succeeded := 0, false
		for _, b := range sub.backups(view) { // newest first
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

// Backups takes and removes backups (coordinator/api/backups' Scheduled):
// BackupService and BackupVolume take the scheduled backup of a service
// or a volume and return it once it succeeded; RemoveBackup removes a
// backup's file and forgets it.
type Backups interface {
	BackupService(ctx context.Context, svc *corpusv1.Service) (*corpusv1.Backup, error)
	BackupVolume(ctx context.Context, v *corpusv1.Volume) (*corpusv1.Backup, error)
	RemoveBackup(ctx context.Context, bk *corpusv1.Backup) error
}

// Loop takes the scheduled backups; the leader runs it.
type Loop struct {
	Store *state.Store
	// Clock is the time of day backups fall due by (nil: clock.System).
	Clock   clock.Clock
	Backups Backups
	Logger  *slog.Logger
}

// take takes the scheduled backup of a subject.
func (l *Loop) take(ctx context.Context, sub backupSubject) (*corpusv1.Backup, error) {
	if sub.service != nil {
		return l.Backups.BackupService(ctx, sub.service)
	}
	return l.Backups.BackupVolume(ctx, sub.volume)
}

// Run takes the scheduled backups while ctx lasts.
func (l *Loop) Run(ctx context.Context) {
	failed := map[string]time.Time{} // subject: when its last try failed
	t := time.NewTicker(backupCheckEvery)
	defer t.Stop()
	for {
		// Due by the time of day; retries wait by the monotonic clock.
		now := time.Now()
		for _, sub := range dueBackups(l.Store.Read(), l.Store.Now(l.Clock)) {
			key := sub.String()
			if at, ok := failed[key]; ok && now.Sub(at) < backupRetry {
				continue
			}
			bk, err := l.take(ctx, sub)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				failed[key] = time.Now()
				l.Logger.Warn("scheduled backup failed", "of", key, "error", err, "retry_in", backupRetry)
				continue
			}
			delete(failed, key)
			l.Logger.Info("scheduled backup taken", "of", key, "backup", bk.Id, "bytes", bk.SizeBytes)
		}
		for _, bk := range expiredBackups(l.Store.Read()) {
			if err := l.Backups.RemoveBackup(ctx, bk); err != nil {
				l.Logger.Warn("removing an expired backup", "service", bk.Service, "volume", bk.Volume, "backup", bk.Id, "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
