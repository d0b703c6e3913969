package backupschedule

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/state"
	"corpus/coordinator/state/statetest"
	corpusv1 "corpus/proto/corpus/v1"
)

// snapOf is a state holding services and backups.
func snapOf(t *testing.T, services []*corpusv1.Service, backups []*corpusv1.Backup) *state.Snap {
	t.Helper()
	return statetest.Store(t, &corpusv1.Snapshot{Services: services, Backups: backups}).Read()
}

func TestBackupSchedule(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(-d)) }
	svc := func(name, schedule, desired string, keep uint32) *corpusv1.Service {
		return &corpusv1.Service{Id: "s-" + name, Name: name, GuestId: "g-" + name, BackupSchedule: schedule, BackupKeep: keep, DesiredState: desired}
	}
	var index uint64
	bk := func(id, service, trigger, status string, finished time.Duration) *corpusv1.Backup {
		index++ // later backups have higher indexes: the newest first below
		return &corpusv1.Backup{Id: id, Service: service, NodeId: "n1", Trigger: trigger, Status: status, FinishedAt: ago(finished), CreateIndex: index}
	}
	day := 24 * time.Hour
	view := snapOf(t, []*corpusv1.Service{
		svc("old", corpusv1.ScheduleDaily, state.DesiredRunning, 2),
		svc("fresh", corpusv1.ScheduleDaily, state.DesiredRunning, 0),
		svc("busy", corpusv1.ScheduleHourly, state.DesiredRunning, 0),
		svc("manual", "", state.DesiredRunning, 0),
		svc("stopped", corpusv1.ScheduleDaily, state.DesiredStopped, 0),
		svc("never", corpusv1.ScheduleWeekly, state.DesiredRunning, 0),
		{Id: "s-ext", Name: "ext", ExternalUrl: "https://api.example.test", BackupSchedule: corpusv1.ScheduleDaily, DesiredState: state.DesiredRunning},
	}, []*corpusv1.Backup{
		bk("b01", "old", corpusv1.BackupSchedule, corpusv1.BackupFailed, 6*day),
		bk("b02", "old", corpusv1.BackupManual, corpusv1.BackupSucceeded, 5*day),
		bk("b03", "old", corpusv1.BackupSchedule, corpusv1.BackupSucceeded, 4*day),
		bk("b04", "old", corpusv1.BackupSchedule, corpusv1.BackupSucceeded, 3*day),
		bk("b05", "old", corpusv1.BackupSchedule, corpusv1.BackupFailed, 2*day+time.Hour),
		bk("b06", "old", corpusv1.BackupSchedule, corpusv1.BackupSucceeded, 2*day),
		bk("b07", "fresh", corpusv1.BackupSchedule, corpusv1.BackupSucceeded, time.Hour),
		bk("b08", "busy", corpusv1.BackupSchedule, corpusv1.BackupSucceeded, 3*time.Hour),
		bk("b09", "busy", corpusv1.BackupSchedule, corpusv1.BackupRunning, 0),
	})
	// old keeps its 2 newest scheduled (b06, b04); b03 goes, and so do
	// the failed ones older than a success; the manual one stays.
	checkSchedule(t, view, now, []string{"service never", "service old"}, []string{"b01", "b03", "b05"})

	// Volumes with a schedule are subjects too; those without are not.
	index = 0
	volBk := func(id, volume string, finished time.Duration) *corpusv1.Backup {
		index++
		return &corpusv1.Backup{Id: id, Volume: volume, NodeId: "n1", Trigger: corpusv1.BackupSchedule, Status: corpusv1.BackupSucceeded, FinishedAt: ago(finished), CreateIndex: index}
	}
	view = statetest.Store(t, &corpusv1.Snapshot{
		Services: []*corpusv1.Service{svc("old", corpusv1.ScheduleDaily, state.DesiredRunning, 2)},
		Volumes: []*corpusv1.Volume{
			{Id: "v1", Name: "data", NodeId: "n1", DesiredState: state.VolumePresent, BackupSchedule: corpusv1.ScheduleDaily, BackupKeep: 1},
			{Id: "v2", Name: "fresh-data", NodeId: "n1", DesiredState: state.VolumePresent, BackupSchedule: corpusv1.ScheduleDaily},
			{Id: "v3", Name: "unscheduled", NodeId: "n1", DesiredState: state.VolumePresent},
			{Id: "v4", Name: "unplaced", DesiredState: state.VolumePresent, BackupSchedule: corpusv1.ScheduleHourly},
		},
		Backups: []*corpusv1.Backup{
			bk("b01", "old", corpusv1.BackupSchedule, corpusv1.BackupFailed, 6*day),
			bk("b02", "old", corpusv1.BackupManual, corpusv1.BackupSucceeded, 5*day),
			bk("b03", "old", corpusv1.BackupSchedule, corpusv1.BackupSucceeded, 4*day),
			bk("b04", "old", corpusv1.BackupSchedule, corpusv1.BackupSucceeded, 3*day),
			bk("b05", "old", corpusv1.BackupSchedule, corpusv1.BackupFailed, 2*day+time.Hour),
			bk("b06", "old", corpusv1.BackupSchedule, corpusv1.BackupSucceeded, 2*day),
			volBk("v01", "data", 3*day), volBk("v02", "data", 2*day), volBk("v03", "fresh-data", time.Hour),
		},
	}).Read()
	checkSchedule(t, view, now, []string{"service old", "volume data"}, []string{"b01", "b03", "b05", "v01"})
}

// checkSchedule checks which subjects are due and which backups expired.
func checkSchedule(t *testing.T, view *state.Snap, now time.Time, wantDue, wantExpired []string) {
	t.Helper()
	var due []string
	for _, s := range dueBackups(view, now) {
		due = append(due, s.String())
	}
	slices.Sort(due)
	if !slices.Equal(due, wantDue) {
		t.Errorf("due = %v, want %v", due, wantDue)
	}
	var expired []string
	for _, b := range expiredBackups(view) {
		expired = append(expired, b.Id)
	}
	slices.Sort(expired)
	if !slices.Equal(expired, wantExpired) {
		t.Errorf("expired = %v, want %v", expired, wantExpired)
	}
}

// fakeBackups records what the loop asks for instead of taking backups
// on agents (coordinator/api/backups does that; the coordinator's and
// the end-to-end tests run it). Its first backup of each subject fails.
type fakeBackups struct {
	mu      sync.Mutex
	taken   []string // "service NAME" or "volume NAME", one per try
	removed []string
}

func (f *fakeBackups) try(what string) (*corpusv1.Backup, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	first := !slices.Contains(f.taken, what)
	f.taken = append(f.taken, what)
	if first {
		return nil, errors.New("agent unreachable")
	}
	return &corpusv1.Backup{Id: "new"}, nil
}

func (f *fakeBackups) BackupService(_ context.Context, svc *corpusv1.Service) (*corpusv1.Backup, error) {
	return f.try("service " + svc.Name)
}

func (f *fakeBackups) BackupVolume(_ context.Context, v *corpusv1.Volume) (*corpusv1.Backup, error) {
	return f.try("volume " + v.Name)
}

func (f *fakeBackups) RemoveBackup(_ context.Context, bk *corpusv1.Backup) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.removed, bk.Id) {
		f.removed = append(f.removed, bk.Id)
	}
	return nil
}

func (f *fakeBackups) tries(what string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, w := range f.taken {
		if w == what {
			n++
		}
	}
	return n
}

// TestLoop: the loop takes what is due at once and every minute after,
// tries a failed backup again only after backupRetry, and removes the
// expired ones; it returns when its context ends.
func TestLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now() // the bubble's fake time
		ago := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(-d)) }
		store := statetest.Store(t, &corpusv1.Snapshot{
			Services: []*corpusv1.Service{
				{Id: "s-db", Name: "db", GuestId: "g-db", BackupSchedule: corpusv1.ScheduleHourly, DesiredState: state.DesiredRunning},
				{Id: "s-old", Name: "old", GuestId: "g-old", BackupSchedule: corpusv1.ScheduleDaily, BackupKeep: 1, DesiredState: state.DesiredRunning},
			},
			Volumes: []*corpusv1.Volume{
				{Id: "v1", Name: "data", NodeId: "n1", DesiredState: state.VolumePresent, BackupSchedule: corpusv1.ScheduleDaily},
			},
			Backups: []*corpusv1.Backup{
				{Id: "b1", Service: "old", NodeId: "n1", Trigger: corpusv1.BackupSchedule, Status: corpusv1.BackupSucceeded, FinishedAt: ago(2 * time.Hour), CreateIndex: 1},
				{Id: "b2", Service: "old", NodeId: "n1", Trigger: corpusv1.BackupSchedule, Status: corpusv1.BackupSucceeded, FinishedAt: ago(time.Hour), CreateIndex: 2},
			},
		})
		f := &fakeBackups{}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			(&Loop{Store: store, Backups: f, Logger: slog.New(slog.DiscardHandler)}).Run(ctx)
		}()
		want := func(when string, db, data int) {
			t.Helper()
			synctest.Wait()
			if got := f.tries("service db"); got != db {
				t.Errorf("%s: %d tries of service db, want %d", when, got, db)
			}
			if got := f.tries("volume data"); got != data {
				t.Errorf("%s: %d tries of volume data, want %d", when, got, data)
			}
			if got := f.tries("service old"); got != 0 {
				t.Errorf("%s: %d tries of service old, backed up an hour ago, want 0", when, got)
			}
		}
		want("at once", 1, 1)
		if !slices.Equal(f.removed, []string{"b1"}) {
			t.Errorf("removed %v, want [b1] (old keeps 1)", f.removed)
		}
		// Passes every minute; the failed ones wait backupRetry. (The
		// fake records no backup, so what succeeded stays due.)
		time.Sleep(backupRetry - 30*time.Second)
		want("before the retry", 1, 1)
		time.Sleep(time.Minute)
		want("after the retry", 2, 2)
		cancel()
		<-done
	})
}
