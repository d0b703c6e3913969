package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"corpus/client"
	"corpus/coordinator"
	"corpus/coordinator/snapshotschedule"
	"corpus/coordinator/state"
	"corpus/internal/pki"
	"corpus/internal/snapshotfile"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// saveSnapshot saves s's state to a file sealed with secret through the
// client package, as `corpus operator snapshot save` does.
func saveSnapshot(t *testing.T, s *server, secret string) (string, *corpusv1.SnapshotHeader) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.snap")
	c := &client.Clients{Snapshots: s.ops().snap}
	h, err := c.SaveSnapshot(context.Background(), path, []byte(secret), nil)
	if err != nil {
		t.Fatalf("SaveSnapshot = %v", err)
	}
	return path, h
}

const snapSecret = "a passphrase of some length"

// TestSnapshotRestore: a snapshot saved from a running coordinator
// restores into a fresh data folder as a new group of one with the same
// cluster id, objects, CA and operator token; the file holds neither the
// CA key nor the state in clear.
func TestSnapshotRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, t.TempDir())
	n1 := s.enroll("n1")
	n1.report(t)
	ops := s.ops()
	for _, name := range []string{"web", "db"} {
		if _, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: name, Spec: &corpusv1.GuestSpec{Image: "busybox"}})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "site", Env: "dev"})); err != nil {
		t.Fatal(err)
	}
	path, h := saveSnapshot(t, s, snapSecret)
	view := s.Store().Read()
	if h.ClusterId != view.Config().ClusterId || h.RaftIndex == 0 || h.Counts["guests"] != 3 || h.Counts["nodes"] != 1 || h.Counts["projects"] != 1 {
		t.Errorf("header = %v, want cluster %s, 3 guests, 1 node, 1 project", h, view.Config().ClusterId)
	}
	raw, _ := os.ReadFile(path)
	caKey, _ := os.ReadFile(filepath.Join(s.dir, coordinator.TLSDir, "ca.key"))
	if len(caKey) == 0 || strings.Contains(string(raw), string(caKey[30:60])) || strings.Contains(string(raw), view.Config().AgentKey) {
		t.Error("the snapshot file holds the CA key or the agent key in clear")
	}
	if got, err := client.InspectSnapshot(path); err != nil || got.RaftIndex != h.RaftIndex {
		t.Errorf("InspectSnapshot = %v, %v", got, err)
	}
	// A second save with nothing written since is the same snapshot.
	if _, h2 := saveSnapshot(t, s, snapSecret); h2.RaftIndex < h.RaftIndex {
		t.Errorf("second save at index %d, first at %d", h2.RaftIndex, h.RaftIndex)
	}

	// A certificate the node got after the snapshot (issued by the CA
	// but recorded nowhere the snapshot has): the group refuses it, as
	// any certificate it does not record...
	newer := s.issue(pki.RoleNode, n1.id, 2*coordinator.DefaultCertTTL)
	if _, err := s.clientsAs(newer, "").cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{})); codeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("Status with an unrecorded node certificate = %v, want Unauthenticated", err)
	}

	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte(snapSecret+"\n"), 0o600)
	dir := t.TempDir()
	// Another host: another replica id, other addresses.
	r := launch(t, dir, func(c *coordinator.Config) {
		c.RestoreFile, c.RestoreKeyFile, c.ReplicaID = path, keyFile, "restored-1"
	})
	r.waitFor("the restored state", func(v *state.Snap) bool {
		return v.Config().GetClusterId() == h.ClusterId && v.GuestByName("web") != nil && v.GuestByName("db") != nil && v.Project("site") != nil && v.Node(n1.id) != nil
	})
	if _, err := os.Stat(filepath.Join(dir, coordinator.OpsTokenFile)); err == nil {
		t.Error("the restore wrote a new operator token; the cluster's own works")
	}
	// The operator's token of the lost group works, the CA is the same.
	if _, err := r.clients(s.OpsToken()).guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "after", Spec: &corpusv1.GuestSpec{Image: "busybox"}})); err != nil {
		t.Errorf("CreateGuest on the restored group = %v", err)
	}
	// ... and the restored group takes it: it is newer than the one the
	// snapshot records, so the node renewed it after the snapshot.
	if _, err := r.clientsAs(newer, "").cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{})); err != nil {
		t.Errorf("Status on the restored group with the node's certificate renewed after the snapshot = %v", err)
	}
	if _, err := r.clientsAs(n1.cert, "").cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{})); err != nil {
		t.Errorf("Status on the restored group with the node's certificate = %v", err)
	}
	if string(r.CACert()) != string(s.CACert()) {
		t.Error("the restored group has another CA")
	}
	peers, err := r.Peers()
	if err != nil || len(peers) != 1 || peers[0].Id != "restored-1" {
		t.Errorf("restored group's peers = %v, %v; want itself alone", peers, err)
	}
	r.waitFor("only the new replica registered", func(v *state.Snap) bool {
		cs := v.Coordinators()
		return len(cs) == 1 && cs[0].ApiAddress == r.APIAddr()
	})
}

// TestRestoreRefusals: a wrong key, a damaged file, a state the state
// machine does not take or a data folder of another cluster is refused
// with an error saying which, and the data folder is left as it was.
func TestRestoreRefusals(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	path, _ := saveSnapshot(t, s, snapSecret)
	keys := t.TempDir()
	good, wrong := filepath.Join(keys, "good"), filepath.Join(keys, "wrong")
	os.WriteFile(good, []byte(snapSecret), 0o600)
	os.WriteFile(wrong, []byte("not the passphrase it was saved with"), 0o600)
	raw, _ := os.ReadFile(path)
	truncated := filepath.Join(t.TempDir(), "truncated.snap")
	os.WriteFile(truncated, raw[:len(raw)-100], 0o600)
	newer := resealed(t, path, func(st *corpusv1.Snapshot) { st.ClusterVersion = "v99.0" })
	idless := resealed(t, path, func(st *corpusv1.Snapshot) {
		st.Guests = append(st.Guests, &corpusv1.Guest{Name: "idless", Spec: &corpusv1.GuestSpec{Image: "busybox"}})
	})
	other := start(t, t.TempDir()) // another cluster's replica
	if err := other.stop(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file, key, dir string
		want                 error
		says                 string
	}{
		{"wrong key", path, wrong, "", snapshotfile.ErrWrongKey, "give the key file"},
		{"truncated", truncated, good, "", snapshotfile.ErrCorrupt, "truncated"},
		{"no key", path, "", "", coordinator.ErrRestoreRefused, "--restore-key-file"},
		{"newer cluster version", newer, good, "", snapshotfile.ErrNewerFormat, "run v99.0 or later"},
		{"a state that does not restore", idless, good, "", snapshotfile.ErrCorrupt, "object missing primary index"},
		{"another cluster's folder", path, good, other.dir, coordinator.ErrRestoreRefused, "belongs to another cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir
			if dir == "" {
				dir = t.TempDir()
			}
			before := listing(t, dir)
			cfg := coordinator.Default()
			cfg.DataDir, cfg.APIAddr, cfg.RaftAddr, cfg.DNS.Addr, cfg.GossipAddr = dir, "127.0.0.1:0", "127.0.0.1:0", "", ""
			cfg.RestoreFile, cfg.RestoreKeyFile = tc.file, tc.key
			cfg.Logger = testLogger(t)
			srv, err := coordinator.New(cfg)
			if err == nil {
				srv.Serve(canceled())
				t.Fatal("New = nil error, want a refusal")
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("New = %v, want %v saying %q", err, tc.want, tc.says)
			}
			if after := listing(t, dir); after != before {
				t.Errorf("the data folder changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// resealed writes a copy of the snapshot file at path, its state changed
// by edit, sealed again with snapSecret.
func resealed(t *testing.T, path string, edit func(*corpusv1.Snapshot)) string {
	t.Helper()
	h, c, st := openSnapshotFile(t, path)
	edit(st)
	var err error
	if c.State, err = proto.Marshal(st); err != nil {
		t.Fatal(err)
	}
	k, err := snapshotfile.NewKey([]byte(snapSecret))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "edited.snap")
	if err := snapshotfile.WriteFile(out, k, h, c); err != nil {
		t.Fatal(err)
	}
	return out
}

// openSnapshotFile reads and opens the snapshot file at path, sealed
// with snapSecret: its header, its contents and the state in them.
func openSnapshotFile(t *testing.T, path string) (*corpusv1.SnapshotHeader, *corpusv1.SnapshotContents, *corpusv1.Snapshot) {
	t.Helper()
	h, payload, err := snapshotfile.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := snapshotfile.Open(h, payload, []byte(snapSecret))
	if err != nil {
		t.Fatal(err)
	}
	st := &corpusv1.Snapshot{}
	if err := proto.Unmarshal(c.State, st); err != nil {
		t.Fatal(err)
	}
	return h, c, st
}

// listing names every file under dir with its size.
func listing(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil {
			b.WriteString(strings.TrimPrefix(p, dir) + " ")
		}
		return nil
	})
	return b.String()
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestScheduledSnapshots: the leader writes a snapshot every interval
// into the folder, sealed with the key file, keeps the newest ones, and
// says their age.
func TestScheduledSnapshots(t *testing.T) {
	t.Parallel()
	dir, keyFile := t.TempDir(), filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte(snapSecret), 0o600)
	reg := prometheus.NewRegistry()
	s := start(t, t.TempDir(), func(c *coordinator.Config) {
		c.Snapshots = snapshotschedule.Config{Dir: dir, Interval: time.Second, Keep: 2, KeyFile: keyFile}
		c.Metrics = reg
	})
	seen := map[string]bool{}
	testrun.Wait(t, 30*time.Second, "three scheduled snapshots, two kept", func() error {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			seen[e.Name()] = true
		}
		if len(seen) < 3 || len(entries) != 2 {
			return fmt.Errorf("%d written, %d in the folder", len(seen), len(entries))
		}
		return nil
	})
	figures := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "corpus_snapshot_") {
			m := f.GetMetric()[0]
			figures[f.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	if figures["corpus_snapshot_age_seconds"] < 0 || figures["corpus_snapshot_age_seconds"] > 60 || figures["corpus_snapshot_last_size_bytes"] <= 0 || figures["corpus_snapshot_failures_total"] != 0 {
		t.Errorf("snapshot metrics = %v, want an age of seconds, a size and no failure", figures)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		h, payload, err := snapshotfile.Read(filepath.Join(dir, e.Name()))
		if err == nil {
			_, err = snapshotfile.Open(h, payload, []byte(snapSecret))
		}
		if err != nil || h.ClusterId != s.Store().Read().Config().ClusterId {
			t.Errorf("%s: %v, %v", e.Name(), h, err)
		}
	}
}

// TestSnapshotFromFollower: a follower passes snapshot save to the leader
// and relays its stream; the file is the leader's snapshot. A leader
// deposed while it takes it answers Unavailable, and is asked again.
func TestSnapshotFromFollower(t *testing.T) {
	t.Parallel()
	rs := startGroup(t, 3)
	f := rs.follower()
	path := filepath.Join(t.TempDir(), "cluster.snap")
	c := &client.Clients{Snapshots: rs.ops(f).snap}
	var h *corpusv1.SnapshotHeader
	whileUnavailable(t, "SaveSnapshot through follower "+f, func() (err error) {
		h, err = c.SaveSnapshot(context.Background(), path, []byte(snapSecret), nil)
		return err
	})
	if h.ClusterId != rs.reps[f].Store().Read().Config().ClusterId || h.Counts["coordinators"] != 3 {
		t.Errorf("header = %v, want the group's cluster and its 3 replicas", h)
	}
	if _, err := client.InspectSnapshot(path); err != nil {
		t.Errorf("InspectSnapshot = %v", err)
	}
}
