package backupschedule

import (
	"bytes"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// snapOf is a state holding services and backups.
func snapOf(t *testing.T, services []*corpusv1.Service, backups []*corpusv1.Backup) *state.Snap {
	t.Helper()
	return snapshotView(t, &corpusv1.Snapshot{Services: services, Backups: backups})
}

// snapshotView is the state a snapshot holds (restored from it: the
// state machine's own way in).
func snapshotView(t *testing.T, snap *corpusv1.Snapshot) *state.Snap {
	t.Helper()
	snap.Version = state.CommandVersion
	b, err := proto.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	store := state.NewStore()
	if err := state.NewFSM(store, slog.New(slog.DiscardHandler)).Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	return store.Read()
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
	view = snapshotView(t, &corpusv1.Snapshot{
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
	})
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
