package api

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
	var due []string
	for _, s := range dueBackups(view, now) {
		due = append(due, s.Name)
	}
	slices.Sort(due)
	if want := []string{"never", "old"}; !slices.Equal(due, want) {
		t.Errorf("due = %v, want %v", due, want)
	}
	var expired []string
	for _, b := range expiredBackups(view) {
		expired = append(expired, b.Id)
	}
	slices.Sort(expired)
	// old keeps its 2 newest scheduled (b06, b04); b03 goes, and so do
	// the failed ones older than a success; the manual one stays.
	if want := []string{"b01", "b03", "b05"}; !slices.Equal(expired, want) {
		t.Errorf("expired = %v, want %v", expired, want)
	}
}
