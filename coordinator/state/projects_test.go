package state_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/compat"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

func userCmd(name, role string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_CreateUser{CreateUser: &corpusv1.CreateUser{User: &corpusv1.User{Name: name, Role: role}}}}
}

func keyCmd(user, fp string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_AddSshKey{AddSshKey: &corpusv1.AddSshKey{User: user, Key: &corpusv1.SshKey{Fingerprint: fp, PublicKey: "ssh-ed25519 AAAA" + fp}}}}
}

// projectCmd creates project hello's env with guest hello-ENV and a route.
func projectCmd(env, guestID, domain string) *corpusv1.Command {
	g := guestCmd(guestID, "hello-"+env).GetCreateGuest().Guest
	return &corpusv1.Command{Cmd: &corpusv1.Command_CreateProject{CreateProject: &corpusv1.CreateProject{
		ProjectId: "p1", Name: "hello",
		Env:    &corpusv1.ProjectEnv{Name: env, Domains: []string{domain}, HttpPort: 80, Branch: "main"},
		Guest:  g,
		Routes: []*corpusv1.Route{{Id: "r-" + env, Kind: string(corpusv1.RouteHTTP), Domain: domain, GuestId: guestID, GuestPort: 80}},
	}}}
}

func beginCmd(id, node string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_BeginRelease{BeginRelease: &corpusv1.BeginRelease{Release: &corpusv1.Release{
		Id: id, Project: "hello", Env: "dev", Commit: "c0ffee", Author: "alice", NodeId: node,
	}}}}
}

func finishCmd(id, node, status string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_FinishRelease{FinishRelease: &corpusv1.FinishRelease{Id: id, NodeId: node, Status: status, Log: "out"}}}
}

func currentCmd(n uint32) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_SetCurrentRelease{SetCurrentRelease: &corpusv1.SetCurrentRelease{Project: "hello", Env: "dev", Number: n, NodeId: nodeID}}}
}

func pruneCmd(n ...uint32) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_PruneReleases{PruneReleases: &corpusv1.PruneReleases{Project: "hello", Env: "dev", Numbers: n, NodeId: nodeID}}}
}

func TestUsersAndKeys(t *testing.T) {
	r := newReplica(t)
	r.must(cluster()...)
	r.must(userCmd("alice", "dev"), keyCmd("alice", "SHA256:a"))
	for _, tc := range []struct {
		name string
		cmd  *corpusv1.Command
		want error
	}{
		{"bad role", userCmd("bob", "admin"), state.ErrInvalid},
		{"taken name", userCmd("alice", "ops"), state.ErrExists},
		{"key of unknown user", keyCmd("bob", "SHA256:b"), state.ErrNotFound},
		{"key owned already", keyCmd("alice", "SHA256:a"), state.ErrExists},
	} {
		before := r.dump()
		if err := r.apply(tc.cmd); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
		after := r.dump()
		before.Index, after.Index = 0, 0
		if !proto.Equal(before, after) {
			t.Errorf("%s changed the users", tc.name)
		}
	}
	v := r.store.Read()
	if u := v.UserByFingerprint("SHA256:a"); u == nil || u.Name != "alice" {
		t.Fatalf("UserByFingerprint = %v, want alice", u)
	}
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_DeleteSshKey{DeleteSshKey: &corpusv1.DeleteSshKey{User: "alice", Fingerprint: "SHA256:a"}}})
	if u := r.store.Read().UserByFingerprint("SHA256:a"); u != nil {
		t.Fatalf("deleted key still maps to %s", u.Name)
	}
}

func TestProjectCreateIsAtomic(t *testing.T) {
	r := newReplica(t)
	r.must(cluster()...)
	r.must(guestCmd("other", "other"))
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_CreateRoute{CreateRoute: &corpusv1.CreateRoute{Route: &corpusv1.Route{
		Id: "taken", Kind: string(corpusv1.RouteHTTP), Domain: "hello.example.test", GuestId: "other", GuestPort: 80,
	}}}})
	before := r.dump()
	if err := r.apply(projectCmd("dev", "g-dev", "hello.example.test")); !errors.Is(err, state.ErrExists) {
		t.Fatalf("project with a taken domain: err = %v, want ErrExists", err)
	}
	after := r.dump()
	before.Index, after.Index = 0, 0
	if !proto.Equal(before, after) {
		t.Fatalf("a refused project create changed the state")
	}
	r.must(projectCmd("dev", "g-dev", "hello.dev.example.test"), projectCmd("prod", "g-prod", "hello.example.org"))
	p := r.store.Read().Project("hello")
	if len(p.Envs) != 2 || p.Envs[0].GuestName != "hello-dev" || p.Envs[1].Name != "prod" {
		t.Fatalf("project envs = %v", p.Envs)
	}
	if g := r.store.Read().GuestByName("hello-dev"); g == nil {
		t.Fatalf("project guest not created")
	}
	if err := r.apply(projectCmd("dev", "g-dev2", "x.example.test")); !errors.Is(err, state.ErrExists) {
		t.Fatalf("second dev env: err = %v, want ErrExists", err)
	}
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_DeleteProject{DeleteProject: &corpusv1.DeleteProject{Name: "hello", Env: "prod"}}})
	if p := r.store.Read().Project("hello"); len(p.Envs) != 1 {
		t.Fatalf("after deleting prod, envs = %v", p.Envs)
	}
	if g := r.store.Read().GuestByName("hello-prod"); g != nil {
		t.Fatalf("unplaced guest of a deleted env still exists")
	}
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_DeleteProject{DeleteProject: &corpusv1.DeleteProject{Name: "hello"}}})
	if p := r.store.Read().Project("hello"); p != nil {
		t.Fatalf("deleted project still exists")
	}
}

func TestReleases(t *testing.T) {
	r := newReplica(t)
	r.must(cluster()...)
	r.must(projectCmd("dev", "g-dev", "hello.dev.example.test"))
	if err := r.apply(beginCmd("rel1", nodeID)); !errors.Is(err, state.ErrBadTransition) {
		t.Fatalf("begin before the guest is placed: err = %v, want ErrBadTransition", err)
	}
	g := r.store.Read().GuestByName("hello-dev")
	r.must(placeCmd(g.Id, nodeID, "", g.ModifyIndex))
	if err := r.apply(beginCmd("rel1", "elsewhere")); !errors.Is(err, state.ErrBadTransition) {
		t.Fatalf("begin from another node: err = %v, want ErrBadTransition", err)
	}
	r.must(beginCmd("rel1", nodeID), finishCmd("rel1", nodeID, corpusv1.ReleaseSucceeded))
	r.must(beginCmd("rel2", nodeID), finishCmd("rel2", nodeID, corpusv1.ReleaseFailed))
	// A deploy that never finished is failed by the next one.
	r.must(beginCmd("rel3", nodeID), beginCmd("rel4", nodeID), finishCmd("rel4", nodeID, corpusv1.ReleaseSucceeded))
	v := r.store.Read()
	rels := v.Releases("hello", "dev")
	want := []struct {
		n      uint32
		status string
	}{{4, "succeeded"}, {3, "failed"}, {2, "failed"}, {1, "succeeded"}}
	if len(rels) != len(want) {
		t.Fatalf("releases = %v", rels)
	}
	for i, w := range want {
		if rels[i].Number != w.n || rels[i].Status != w.status {
			t.Errorf("release %d = r%d %s, want r%d %s", i, rels[i].Number, rels[i].Status, w.n, w.status)
		}
	}
	if cur := corpusv1.EnvNamed(v.Project("hello"), "dev").CurrentRelease; cur != 4 {
		t.Fatalf("current = %d, want 4", cur)
	}
	if err := r.apply(finishCmd("rel4", nodeID, corpusv1.ReleaseFailed)); !errors.Is(err, state.ErrBadTransition) {
		t.Fatalf("refinishing differently: err = %v", err)
	}
	if err := r.apply(currentCmd(2)); !errors.Is(err, state.ErrBadTransition) {
		t.Fatalf("rolling back to a failed release: err = %v", err)
	}
	if err := r.apply(pruneCmd(4)); !errors.Is(err, state.ErrBadTransition) {
		t.Fatalf("pruning the current release: err = %v", err)
	}
	r.must(currentCmd(1), pruneCmd(4, 3))
	if err := r.apply(currentCmd(4)); !errors.Is(err, state.ErrBadTransition) {
		t.Fatalf("rolling forward to a pruned release: err = %v", err)
	}
	snap := r.dump()
	if len(snap.Releases) != 4 || len(snap.Projects) != 1 {
		t.Fatalf("snapshot holds %d releases, %d projects", len(snap.Releases), len(snap.Projects))
	}
	// A restored replica answers the same.
	r2 := newReplica(t)
	sink := &memSink{}
	s, _ := r.fsm.Snapshot()
	if err := s.Persist(sink); err != nil {
		t.Fatal(err)
	}
	if err := r2.fsm.Restore(sink.reader()); err != nil {
		t.Fatal(err)
	}
	if got := r2.store.Read().ReleaseByNumber("hello", "dev", 1); got == nil || got.Status != "succeeded" {
		t.Fatalf("restored r1 = %v", got)
	}
}

func TestManifestDomains(t *testing.T) {
	r := newReplica(t)
	r.must(cluster()...)
	r.must(projectCmd("dev", "g-dev", "hello.dev.example.test"))
	g := r.store.Read().GuestByName("hello-dev")
	r.must(placeCmd(g.Id, nodeID, "", g.ModifyIndex))
	set := func(node string, domains ...string) error {
		var routes []*corpusv1.Route
		for _, d := range domains {
			if rt := r.store.Read().RouteByDomain(d); rt == nil {
				routes = append(routes, &corpusv1.Route{Id: "m-" + d, Kind: string(corpusv1.RouteHTTP), Domain: d, GuestId: "g-dev", GuestPort: 80})
			}
		}
		return r.apply(&corpusv1.Command{Cmd: &corpusv1.Command_SetManifestDomains{SetManifestDomains: &corpusv1.SetManifestDomains{
			Project: "hello", Env: "dev", NodeId: node, Domains: domains, Routes: routes,
		}}})
	}
	if err := set("elsewhere", "a.example.test"); !errors.Is(err, state.ErrBadTransition) {
		t.Fatalf("from another node: err = %v", err)
	}
	if err := set(nodeID, "a.example.test", "b.example.test"); err != nil {
		t.Fatal(err)
	}
	if len(r.store.Read().RoutesOfGuest("g-dev")) != 3 {
		t.Fatalf("routes = %v, want the project's and two more", r.store.Read().RoutesOfGuest("g-dev"))
	}
	// Dropping one removes its route; the project's own domain stays.
	if err := set(nodeID, "b.example.test"); err != nil {
		t.Fatal(err)
	}
	v := r.store.Read()
	if v.RouteByDomain("a.example.test") != nil || v.RouteByDomain("b.example.test") == nil || v.RouteByDomain("hello.dev.example.test") == nil {
		t.Fatalf("routes after dropping a = %v", v.RoutesOfGuest("g-dev"))
	}
	// A domain routed elsewhere fails the whole change.
	r.must(guestCmd("other", "other"))
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_CreateRoute{CreateRoute: &corpusv1.CreateRoute{Route: &corpusv1.Route{
		Id: "taken", Kind: string(corpusv1.RouteHTTP), Domain: "taken.example.test", GuestId: "other", GuestPort: 80,
	}}}})
	before := r.dump()
	routes := []*corpusv1.Route{{Id: "x", Kind: string(corpusv1.RouteHTTP), Domain: "taken.example.test", GuestId: "g-dev", GuestPort: 80}}
	err := r.apply(&corpusv1.Command{Cmd: &corpusv1.Command_SetManifestDomains{SetManifestDomains: &corpusv1.SetManifestDomains{
		Project: "hello", Env: "dev", NodeId: nodeID, Domains: []string{"taken.example.test"}, Routes: routes,
	}}})
	if !errors.Is(err, state.ErrExists) {
		t.Fatalf("taking a routed domain: err = %v", err)
	}
	after := r.dump()
	before.Index, after.Index = 0, 0
	if !proto.Equal(before, after) {
		t.Fatalf("a refused domain change changed the state")
	}
}

func TestAudit(t *testing.T) {
	r := newReplica(t)
	cmds := cluster()
	g := guestCmd(guestID, guestName)
	g.Actor = "user:alice"
	r.must(append(cmds, g)...)
	dup := guestCmd("other-id", guestName)
	dup.Actor = "ops"
	if err := r.apply(dup); !errors.Is(err, state.ErrExists) {
		t.Fatalf("dup create: %v", err)
	}
	log := r.store.Read().Audit()
	if len(log) != len(cmds)+2 {
		t.Fatalf("audit has %d entries, want %d: %v", len(log), len(cmds)+2, log)
	}
	created, refused := log[len(log)-2], log[len(log)-1]
	if created.Actor != "user:alice" || created.Action != "create_guest" || created.Target != guestName || created.Result != "ok" {
		t.Errorf("audit of the create = %v", created)
	}
	if refused.Actor != "ops" || refused.Result == "ok" || !strings.Contains(refused.Result, "already exists") || refused.Index != r.index {
		t.Errorf("audit of the refused create = %v", refused)
	}
	if log[0].Actor != state.ActorSystem || log[0].Action != "bootstrap_cluster" {
		t.Errorf("first entry = %v", log[0])
	}
	// The log is bounded.
	for i := 0; i < state.MaxAudit+150; i++ {
		r.apply(dup)
	}
	if n := len(r.store.Read().Audit()); n > state.MaxAudit+100 || n < state.MaxAudit {
		t.Errorf("audit holds %d entries, want about %d", n, state.MaxAudit)
	}
}

// TestImageReleases: a release from an image has an image and no
// commit, refused until every replica can store one (the cluster
// version allows it); one with both, or neither, never is.
func TestImageReleases(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(cluster()...)
	r.must(projectCmd("dev", "g-dev", "hello.dev.example.test"))
	g := r.store.Read().GuestByName("hello-dev")
	r.must(placeCmd(g.Id, nodeID, "", g.ModifyIndex))
	image := func(id, commit, ref, digest string) *corpusv1.Command {
		c := beginCmd(id, nodeID)
		rel := c.GetBeginRelease().Release
		rel.Commit, rel.Image, rel.ImageDigest = commit, ref, digest
		return c
	}
	digest := "sha256:" + strings.Repeat("ab", 32)
	r.must(clusterVersionCmd("v0.1"))
	if err := r.apply(image("rel1", "", "registry.example/site:1", digest)); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("an image release at cluster version v0.1: err = %v, want ErrInvalid (a v0.1 replica refuses it)", err)
	}
	r.must(clusterVersionCmd(compat.Since(compat.ImageReleases).String()))
	r.must(image("rel1", "", "registry.example/site:1", digest), finishCmd("rel1", nodeID, corpusv1.ReleaseSucceeded))
	// An image that could not be pulled: no digest, failed.
	r.must(image("rel2", "", "registry.example/missing:1", ""), finishCmd("rel2", nodeID, corpusv1.ReleaseFailed))
	for _, bad := range []*corpusv1.Command{image("rel3", "c0ffee", "registry.example/site:1", digest), image("rel3", "", "", digest)} {
		if err := r.apply(bad); !errors.Is(err, state.ErrInvalid) {
			t.Errorf("begin %v: err = %v, want ErrInvalid", bad.GetBeginRelease().Release, err)
		}
	}
	rels := r.store.Read().Releases("hello", "dev")
	if len(rels) != 2 || rels[1].ImageDigest != digest || rels[1].Image != "registry.example/site:1" || rels[1].Status != corpusv1.ReleaseSucceeded {
		t.Fatalf("releases = %v", rels)
	}
}
