package state_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state"
	"corpus/internal/seal"
	corpusv1 "corpus/proto/corpus/v1"
)

func serviceCmd(t *testing.T, k *seal.Keyring, name string) *corpusv1.Command {
	t.Helper()
	pw, err := k.Seal([]byte("s3cret"), state.ServicePlace(name, "PASSWORD"))
	if err != nil {
		t.Fatal(err)
	}
	g := guestCmd("g-"+name, corpusv1.ServiceGuestName(name)).GetCreateGuest().Guest
	return &corpusv1.Command{Cmd: &corpusv1.Command_CreateService{CreateService: &corpusv1.CreateService{
		Service: &corpusv1.Service{Id: "s-" + name, Name: name, Template: "postgresql", Version: "15", Env: "dev",
			TemplateSpec: &corpusv1.ServiceTemplate{Name: "postgresql", Port: 5432},
			Secrets:      map[string][]byte{"PASSWORD": pw}},
		Guest: g,
	}}}
}

func linkCmd(service, as string, config map[string][]byte) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_LinkService{LinkService: &corpusv1.LinkService{
		Service: service, Link: &corpusv1.ServiceLink{Project: "hello", Env: "dev", As: as}, Config: config,
	}}}
}

func serviceDesiredCmd(name, desired string, purge bool) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_SetServiceDesired{SetServiceDesired: &corpusv1.SetServiceDesired{Name: name, DesiredState: desired, Purge: purge}}}
}

// unchanged applies cmd, wants err, and checks the state did not change.
func unchanged(t *testing.T, r *replica, what string, cmd *corpusv1.Command, want error) {
	t.Helper()
	before := r.dump()
	if err := r.apply(cmd); !errors.Is(err, want) {
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
	after := r.dump()
	before.Index, after.Index = 0, 0
	if !proto.Equal(before, after) {
		t.Errorf("%s changed the state", what)
	}
}

func TestServices(t *testing.T) {
	r := newReplica(t)
	r.must(cluster()...)
	r.must(projectCmd("dev", "g-dev", "hello.dev.example.test"))
	k, kr := testRing(t, "k1")
	r.must(keyringCmd(kr, "", nil, nil))

	r.must(serviceCmd(t, k, "db"))
	v := r.store.Read()
	svc := v.Service("db")
	if svc == nil || svc.GuestName != "svc-db" || v.ServiceOfGuest(svc.GuestId) == nil || v.GuestByName("svc-db") == nil {
		t.Fatalf("service db = %v; its guest %v", svc, v.GuestByName("svc-db"))
	}
	if ref := v.GuestProjects()[svc.GuestId]; ref.Env != "dev" {
		t.Errorf("the service guest's placement env = %+v, want dev", ref)
	}
	unchanged(t, r, "the same name again", serviceCmd(t, k, "db"), state.ErrExists)
	unsealed := serviceCmd(t, k, "other")
	unsealed.GetCreateService().Service.Secrets = map[string][]byte{"PASSWORD": []byte("in clear")}
	unchanged(t, r, "secrets in clear", unsealed, state.ErrStale)

	url := sealed(t, k, "DATABASE_URL", "postgres://corpus:s3cret@10.0.0.2:5432/corpus")
	r.must(setConfigCmd(map[string][]byte{"MINE": sealed(t, k, "MINE", "1")}))
	unchanged(t, r, "a link over a key the user set", linkCmd("db", "MINE", map[string][]byte{"MINE": url}), state.ErrExists)
	unchanged(t, r, "a link to nowhere", &corpusv1.Command{Cmd: &corpusv1.Command_LinkService{LinkService: &corpusv1.LinkService{
		Service: "db", Link: &corpusv1.ServiceLink{Project: "nope", Env: "dev", As: "X"}, Config: map[string][]byte{"X_URL": url},
	}}}, state.ErrNotFound)
	r.must(linkCmd("db", "DATABASE", map[string][]byte{"DATABASE_URL": url}))
	if got := envConfig(t, r, k)["DATABASE_URL"]; got != "postgres://corpus:s3cret@10.0.0.2:5432/corpus" {
		t.Errorf("DATABASE_URL = %q", got)
	}
	// Linked again under another name: the old keys go, the new come.
	url2 := sealed(t, k, "PG_URL", "postgres://x")
	r.must(linkCmd("db", "PG", map[string][]byte{"PG_URL": url2}))
	cfg := envConfig(t, r, k)
	if _, old := cfg["DATABASE_URL"]; old || cfg["PG_URL"] != "postgres://x" || cfg["MINE"] != "1" {
		t.Errorf("config after linking again = %v", cfg)
	}
	if links := r.store.Read().LinksOf("hello", "dev"); len(links) != 1 || !slices.Equal(links[0].Links[0].Keys, []string{"PG_URL"}) {
		t.Errorf("LinksOf = %v", links)
	}

	unchanged(t, r, "delete while linked", serviceDesiredCmd("db", state.DesiredDeleted, false), state.ErrBadTransition)
	r.must(serviceDesiredCmd("db", state.DesiredStopped, false))
	if g := r.store.Read().GuestByName("svc-db"); g.DesiredState != state.DesiredStopped {
		t.Errorf("stopping the service left its guest %s", g.DesiredState)
	}

	// Rotation reseals the service's secrets with the projects' config;
	// leaving them out changes nothing.
	k2, kr2 := testRing(t, "k2")
	resealed := func(withService bool) []*corpusv1.ResealedConfig {
		out := []*corpusv1.ResealedConfig{{Project: "hello", Env: "dev", Config: map[string][]byte{}}}
		for key, val := range envConfig(t, r, k) {
			s, err := k2.Seal([]byte(val), state.ConfigPlace("hello", "dev", key))
			if err != nil {
				t.Fatal(err)
			}
			out[0].Config[key] = s
		}
		if withService {
			s, err := k2.Seal([]byte("s3cret"), state.ServicePlace("db", "PASSWORD"))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, &corpusv1.ResealedConfig{Service: "db", Config: map[string][]byte{"PASSWORD": s}})
		}
		return out
	}
	unchanged(t, r, "a rotation leaving the service's secrets out", keyringCmd(kr2, "k1", resealed(false), nil), state.ErrStale)
	r.must(keyringCmd(kr2, "k1", resealed(true), nil))
	if p, err := k2.Open(r.store.Read().Service("db").Secrets["PASSWORD"], state.ServicePlace("db", "PASSWORD")); err != nil || string(p) != "s3cret" {
		t.Errorf("the service's secret after rotation: %q, %v", p, err)
	}

	// Backups: begun, finished once; a project deleted drops its links.
	begin := &corpusv1.Command{Cmd: &corpusv1.Command_BeginBackup{BeginBackup: &corpusv1.BeginBackup{Backup: &corpusv1.Backup{
		Id: "b1", Service: "db", NodeId: nodeID, SourceNodeId: nodeID, Template: "postgresql"}}}}
	r.must(begin)
	unchanged(t, r, "a backup finished without its checksum", &corpusv1.Command{Cmd: &corpusv1.Command_FinishBackup{FinishBackup: &corpusv1.FinishBackup{
		Id: "b1", Status: corpusv1.BackupSucceeded}}}, state.ErrInvalid)
	sum := "a3f4b2c1a3f4b2c1a3f4b2c1a3f4b2c1a3f4b2c1a3f4b2c1a3f4b2c1a3f4b2c1"
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_FinishBackup{FinishBackup: &corpusv1.FinishBackup{Id: "b1", Status: corpusv1.BackupSucceeded, SizeBytes: 10, Sha256: sum}}})
	unchanged(t, r, "a backup finished twice", &corpusv1.Command{Cmd: &corpusv1.Command_FinishBackup{FinishBackup: &corpusv1.FinishBackup{
		Id: "b1", Status: corpusv1.BackupFailed}}}, state.ErrBadTransition)
	if bs := r.store.Read().BackupsOnNode(nodeID); len(bs) != 1 || bs[0].Sha256 != sum {
		t.Errorf("BackupsOnNode = %v", bs)
	}
	// A snapshot holds services and backups.
	snap := r.dump()
	if len(snap.Services) != 1 || len(snap.Backups) != 1 {
		t.Errorf("snapshot: %d services, %d backups", len(snap.Services), len(snap.Backups))
	}
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_DeleteProject{DeleteProject: &corpusv1.DeleteProject{Name: "hello"}}})
	if links := r.store.Read().Service("db").Links; len(links) != 0 {
		t.Errorf("links after the project went: %v", links)
	}
	r.must(serviceDesiredCmd("db", state.DesiredDeleted, true))
	v = r.store.Read()
	// Never placed, the guest goes at once.
	if v.Service("db") != nil || len(v.Backups("db")) != 0 || v.GuestByName("svc-db") != nil {
		t.Errorf("after delete --purge: service %v, backups %v, guest %v", v.Service("db"), v.Backups("db"), v.GuestByName("svc-db"))
	}
}

// TestReplaceServiceGuest: a lost service gets a new guest and volume on
// another node in one step; its old volume stays on the dead node,
// unbound; a service whose node is up is not replaced.
func TestReplaceServiceGuest(t *testing.T) {
	r := newReplica(t)
	r.must(cluster()...)
	r.must(tokenCmd("tok2", "h2", epoch.Add(time.Hour)), enrollCmd("tok2", "h2", "node-2", "n2"), updateNodeCmd("node-2", 8<<30))
	k, kr := testRing(t, "k1")
	r.must(keyringCmd(kr, "", nil, nil))
	create := serviceCmd(t, k, "db")
	create.GetCreateService().Guest.Spec.Volume = &corpusv1.VolumeSpec{SizeBytes: 64 << 20, Path: "/var/lib/postgresql"}
	r.must(create)
	old := r.store.Read().GuestByName("svc-db")
	r.must(placeCmd(old.Id, nodeID, "", old.ModifyIndex))

	replace := func(oldID string) *corpusv1.Command {
		g := guestCmd("g-db-2", "svc-db-2").GetCreateGuest().Guest
		g.Spec.Volume = &corpusv1.VolumeSpec{SizeBytes: 64 << 20, Path: "/var/lib/postgresql"}
		return &corpusv1.Command{Cmd: &corpusv1.Command_ReplaceServiceGuest{ReplaceServiceGuest: &corpusv1.ReplaceServiceGuest{
			Service: "db", OldGuestId: oldID, Guest: g, NodeId: "node-2"}}}
	}
	unchanged(t, r, "replacing a service whose node is up", replace(old.Id), state.ErrBadTransition)
	r.must(nodeStatusCmd(nodeID, state.NodeDown))
	unchanged(t, r, "replacing another guest than the service's", replace("g-other"), state.ErrStale)
	onOld := replace(old.Id)
	onOld.GetReplaceServiceGuest().NodeId = nodeID
	if err := r.apply(onOld); err == nil {
		t.Error("replacing onto the node that is down succeeded")
	}
	r.must(replace(old.Id))
	v := r.store.Read()
	svc, g := v.Service("db"), v.GuestByName("svc-db-2")
	if svc.GuestId != "g-db-2" || svc.GuestName != "svc-db-2" || g == nil || g.NodeId != "node-2" || g.Address == "" {
		t.Fatalf("after the replace: service on %s/%s, guest %v", svc.GuestId, svc.GuestName, g)
	}
	if v.GuestByName("svc-db") != nil {
		t.Error("the lost guest's record is still there")
	}
	if vol := v.Volume("svc-db"); vol == nil || vol.GuestId != "" || vol.NodeId != nodeID || vol.DesiredState != state.VolumePresent {
		t.Errorf("the lost guest's volume = %v, want kept unbound on n1", vol)
	}
	if vol := v.Volume("svc-db-2"); vol == nil || vol.NodeId != "node-2" || vol.GuestId != "g-db-2" {
		t.Errorf("the new volume = %v", vol)
	}
	if v.ServiceOfGuest("g-db-2") == nil {
		t.Error("the new guest is not the service's")
	}
}
