package coordinator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/client"
	"corpus/coordinator/keyring"
	"corpus/coordinator/state"
	"corpus/internal/rpc"
	"corpus/internal/snapshotfile"
	corpusv1 "corpus/proto/corpus/v1"
)

// objects names what a state holds, by kind: what a restore must bring
// back exactly. Coordinators are left out: the group keeps its own.
func objects(st *corpusv1.Snapshot) string {
	var b strings.Builder
	list := func(kind string, names []string) {
		slices.Sort(names)
		fmt.Fprintf(&b, "%s=%s ", kind, strings.Join(names, ","))
	}
	var guests, projects, users, records []string
	for _, g := range st.Guests {
		guests = append(guests, g.Name)
	}
	for _, p := range st.Projects {
		projects = append(projects, p.Name)
	}
	for _, u := range st.Users {
		users = append(users, u.Name)
	}
	for _, r := range st.DnsRecords {
		records = append(records, r.Name+"/"+r.Data)
	}
	list("guests", guests)
	list("projects", projects)
	list("users", users)
	list("records", records)
	return b.String()
}

// fileObjects is objects of the state in the snapshot file at path.
func fileObjects(t *testing.T, path string) string {
	t.Helper()
	_, _, st := openSnapshotFile(t, path)
	return objects(st)
}

// TestLiveRestore: a snapshot restored into a running group of three
// (through a follower) leaves every replica with exactly the snapshot's
// objects, what was written after it gone and what was deleted after it
// back; the group keeps its replicas; writes work after, and the state
// survives a change of leader. A damaged file, another cluster's
// snapshot and a state no replica can take are refused and change
// nothing.
func TestLiveRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := startGroup(t, 3)
	lead := rs.leader()
	ops := rs.ops(lead)
	createGuest := func(name string) {
		t.Helper()
		whileUnavailable(t, "CreateGuest("+name+")", func() error {
			_, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: name, Spec: &corpusv1.GuestSpec{Image: "busybox"}}))
			if connect.CodeOf(err) == connect.CodeAlreadyExists {
				return nil // a retry of one that was done
			}
			return err
		})
	}
	for _, g := range []string{"web", "db", "cache"} {
		createGuest(g)
	}
	if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "site", Env: "dev"})); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: "alice", Role: "dev"})); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "group.snap")
	var h *corpusv1.SnapshotHeader
	whileUnavailable(t, "SaveSnapshot", func() (err error) {
		h, err = (&client.Clients{Snapshots: ops.snap}).SaveSnapshot(ctx, path, []byte(snapSecret), nil)
		return err
	})
	want := fileObjects(t, path)
	if !strings.Contains(want, "guests=cache,db,site-dev,web ") {
		t.Fatalf("the snapshot holds %s", want)
	}

	// After the snapshot: more objects, some deleted.
	createGuest("late")
	if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "blog", Env: "dev"})); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.guests.DeleteGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "cache"})); err != nil && !rpc.Gone(err) {
		t.Fatal(err)
	}
	if _, err := ops.users.DeleteUser(ctx, connect.NewRequest(&corpusv1.DeleteUserRequest{Name: "alice"})); err != nil && !rpc.Gone(err) {
		t.Fatal(err)
	}
	rs.reps[lead].waitFor("the later writes", func(v *state.Snap) bool {
		return v.GuestByName("cache") == nil && v.User("alice") == nil && v.Project("blog") != nil
	})
	later := objects(rs.reps[lead].Store().Read().Dump())
	if later == want {
		t.Fatal("the writes after the snapshot changed nothing")
	}

	// Refused: a damaged file, a wrong key, another cluster's snapshot, a
	// state that does not restore.
	raw, _ := os.ReadFile(path)
	damaged := append([]byte(nil), raw...)
	damaged[len(damaged)-10] ^= 0xff
	other := start(t, t.TempDir())
	otherPath, _ := saveSnapshot(t, other, snapSecret)
	otherRaw, _ := os.ReadFile(otherPath)
	// Sealed right, its state one that no replica's state machine takes
	// (a guest without an id): Raft would panic a replica it gave it to.
	unrestorable, _ := os.ReadFile(resealed(t, path, func(st *corpusv1.Snapshot) {
		st.Guests = append(st.Guests, &corpusv1.Guest{Name: "idless", Spec: &corpusv1.GuestSpec{Image: "busybox"}})
	}))
	f := rs.follower()
	for _, tc := range []struct {
		name string
		file []byte
		key  string
		code connect.Code
		says string
	}{
		{"damaged", damaged, snapSecret, connect.CodeInvalidArgument, "SHA-256"},
		{"wrong key", raw, "not the passphrase it was saved with", connect.CodeInvalidArgument, "give the key file"},
		{"another cluster", otherRaw, snapSecret, connect.CodeFailedPrecondition, "--force"},
		{"unrestorable", unrestorable, snapSecret, connect.CodeInvalidArgument, "does not restore"},
	} {
		// Sent as is, the client's own checks skipped: the leader checks.
		// Asked again while the group has no leader (an election, on a
		// loaded machine).
		var err error
		eventuallyT(t, "an answer to the "+tc.name+" snapshot", func() error {
			if _, err = restoreRaw(t, rs.ops(f), tc.file, tc.key, false); connect.CodeOf(err) == connect.CodeUnavailable {
				return err
			}
			return nil
		})
		if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("restoring the %s snapshot = %v, want %v saying %q", tc.name, err, tc.code, tc.says)
		}
		for id, r := range rs.reps {
			if got := objects(r.Store().Read().Dump()); got != later {
				t.Errorf("after the %s snapshot was refused, %s holds %s, want %s", tc.name, id, got, later)
			}
		}
	}
	bad := filepath.Join(t.TempDir(), "damaged.snap")
	os.WriteFile(bad, damaged, 0o600)
	if _, err := (&client.Clients{Snapshots: rs.ops(f).snap}).RestoreSnapshot(ctx, bad, []byte(snapSecret), false, nil); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("client RestoreSnapshot of a damaged file = %v, want it refused as damaged", err)
	}

	// The restore, through a follower.
	var progressed uint64
	var res *corpusv1.RestoreSnapshotResponse
	began := time.Now()
	whileUnavailable(t, "RestoreSnapshot", func() (err error) {
		res, err = (&client.Clients{Snapshots: rs.ops(f).snap}).RestoreSnapshot(ctx, path, []byte(snapSecret), false, func(done, total uint64) { progressed = done })
		return err
	})
	t.Logf("restored %d objects (%d bytes sealed) through a follower in %s: index %d term %d", res.Objects, h.PayloadSize, time.Since(began).Round(time.Millisecond), res.RaftIndex, res.RaftTerm)
	if res.SnapshotIndex != h.RaftIndex || res.ClusterId != h.ClusterId || res.RaftIndex <= h.RaftIndex || res.Objects == 0 || res.RestoreId == "" || progressed != h.PayloadSize {
		t.Errorf("RestoreSnapshot = %v (progress %d), want the snapshot's index %d restored past it", res, progressed, h.RaftIndex)
	}
	for id, r := range rs.reps {
		r.waitFor("the restored state on "+id, func(v *state.Snap) bool { return v.Config().GetRestore().GetId() == res.RestoreId })
		v := r.Store().Read()
		if got := objects(v.Dump()); got != want {
			t.Errorf("%s holds %s, want the snapshot's %s", id, got, want)
		}
		if n := len(v.Coordinators()); n != 3 {
			t.Errorf("%s knows %d replicas, want the group's 3", id, n)
		}
		if v.Index() < res.RaftIndex || r.Store().Applied() < res.RaftIndex {
			t.Errorf("%s is at index %d (applied %d), want at least %d", id, v.Index(), r.Store().Applied(), res.RaftIndex)
		}
	}

	// Writes work after; a new leader keeps the state.
	createGuest("after")
	if err := rs.reps[lead].stop(); err != nil {
		t.Fatal(err)
	}
	delete(rs.reps, lead)
	next := rs.leader()
	rs.reps[next].waitFor("the write after the restore", func(v *state.Snap) bool { return v.GuestByName("after") != nil })
	if _, err := rs.ops(next).guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "later2", Spec: &corpusv1.GuestSpec{Image: "busybox"}})); err != nil {
		t.Fatalf("CreateGuest on the new leader = %v", err)
	}
	for id, r := range rs.reps {
		r.waitFor("later2 on "+id, func(v *state.Snap) bool { return v.GuestByName("later2") != nil })
		got := objects(r.Store().Read().Dump())
		wantNow := strings.Replace(want, "guests=cache,db,site-dev,web ", "guests=after,cache,db,later2,site-dev,web ", 1)
		if got != wantNow {
			t.Errorf("after the leader changed, %s holds %s, want %s", id, got, wantNow)
		}
	}
}

// TestLiveRestoreForced: a snapshot of another cluster restored with
// force brings that cluster's objects under this one's identity: its
// cluster id, CA and operator token stay, and the snapshot's sealed
// values open with this cluster's keyring key-encryption key.
func TestLiveRestoreForced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := start(t, t.TempDir())
	if _, err := src.ops().service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{
		Name: "mail", ExternalUrl: "https://mail.example.test", Secrets: map[string]string{"API_KEY": "mail-planted"}})); err != nil {
		t.Fatal(err)
	}
	path, h := saveSnapshot(t, src, snapSecret)
	dir := t.TempDir()
	dst := start(t, dir)
	id := dst.Store().Read().Config().ClusterId
	if h.ClusterId == id {
		t.Fatal("two clusters with one id")
	}
	res, err := (&client.Clients{Snapshots: dst.ops().snap}).RestoreSnapshot(ctx, path, []byte(snapSecret), true, nil)
	if err != nil {
		t.Fatalf("RestoreSnapshot --force = %v", err)
	}
	if res.ClusterId != id || res.SnapshotClusterId != h.ClusterId {
		t.Errorf("RestoreSnapshot --force = %v, want cluster %s taking %s's snapshot", res, id, h.ClusterId)
	}
	v := dst.Store().Read()
	svc := v.Service("mail")
	if v.Config().ClusterId != id || svc == nil {
		t.Fatalf("after the forced restore: cluster %s, service mail %v; want cluster %s with the snapshot's service", v.Config().ClusterId, svc, id)
	}
	k, err := openRing(t, dst, dir).Open(v)
	if err != nil {
		t.Fatalf("opening the restored keyring with this cluster's CA: %v", err)
	}
	if got, err := keyring.OpenSecrets(k, "mail", svc.Secrets); err != nil || got["API_KEY"] != "mail-planted" {
		t.Errorf("the restored secrets = %v, %v; want API_KEY=mail-planted", got, err)
	}
	// The operator token of this cluster still works.
	if _, err := dst.ops().guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "after", Spec: &corpusv1.GuestSpec{Image: "busybox"}})); err != nil {
		t.Errorf("CreateGuest after the forced restore = %v", err)
	}
}

// whileUnavailable runs f again while the group answers Unavailable (an
// election, on a loaded machine); any other error fails the test.
func whileUnavailable(t *testing.T, what string, f func() error) {
	t.Helper()
	eventuallyT(t, what, func() error {
		err := f()
		if err != nil && connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("%s = %v", what, err)
		}
		return err
	})
}

// restoreRaw sends the snapshot file's bytes to RestoreSnapshot with the
// key derived from secret, without the client's checks.
func restoreRaw(t *testing.T, c clients, file []byte, secret string, force bool) (*corpusv1.RestoreSnapshotResponse, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "raw.snap")
	os.WriteFile(path, file, 0o600)
	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h, err := snapshotfile.ReadHeader(r)
	if err != nil {
		t.Fatal(err)
	}
	key, err := snapshotfile.DeriveKey(h, []byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	payload := file[len(file)-int(h.PayloadSize):]
	stream := c.snap.RestoreSnapshot(context.Background())
	stream.Send(&corpusv1.RestoreSnapshotRequest{Header: h, Key: key, Force: force})
	snapshotfile.Chunks(payload, func(b []byte) error { return stream.Send(&corpusv1.RestoreSnapshotRequest{Data: b}) })
	res, err := stream.CloseAndReceive()
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}
