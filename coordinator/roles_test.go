package coordinator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestUserRoles: devs act on the projects granted to them only, viewers
// only read them, tokens are personal, and a revoked token's calls end.
func TestUserRoles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, t.TempDir())
	n1 := s.enroll("n1")
	n1.report(t)
	ops := s.ops()
	for _, p := range []string{"hello", "other"} {
		if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: p, Env: "dev"})); err != nil {
			t.Fatal(err)
		}
	}
	s.waitFor("guests placed", func(v *state.Snap) bool {
		return v.GuestByName("hello-dev").GetNodeId() != "" && v.GuestByName("other-dev").GetNodeId() != ""
	})
	alice := s.clients(s.userToken("alice", "dev", 0))
	val := s.clients(s.userToken("val", "viewer", 0))
	for _, u := range []string{"alice", "val"} {
		if _, err := ops.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: "hello", User: u})); err != nil {
			t.Fatal(err)
		}
	}
	denied := func(what string, err error) {
		t.Helper()
		if codeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%s = %v, want PermissionDenied", what, err)
		}
	}
	allowed := func(what string, err error) {
		t.Helper()
		if c := codeOf(err); c == connect.CodePermissionDenied || c == connect.CodeUnauthenticated {
			t.Errorf("%s = %v, want it allowed", what, err)
		}
	}
	list, err := alice.project.ListProjects(ctx, connect.NewRequest(&corpusv1.ListProjectsRequest{}))
	if err != nil || len(list.Msg.Projects) != 1 || list.Msg.Projects[0].Project.Name != "hello" {
		t.Errorf("alice's project list = %v, %v; want hello only", list, err)
	}
	_, err = alice.project.GetProject(ctx, connect.NewRequest(&corpusv1.GetProjectRequest{Name: "hello"}))
	allowed("alice GetProject hello", err)
	_, err = alice.project.GetProject(ctx, connect.NewRequest(&corpusv1.GetProjectRequest{Name: "other"}))
	denied("alice GetProject other", err)
	_, err = alice.project.ListReleases(ctx, connect.NewRequest(&corpusv1.ListReleasesRequest{Project: "other"}))
	denied("alice ListReleases other", err)
	_, err = alice.guests.StopGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "other-dev"}))
	denied("alice stops other-dev", err)
	_, err = alice.guests.StopGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "hello-dev"}))
	allowed("alice stops hello-dev", err)
	_, err = alice.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "mine", Spec: &corpusv1.GuestSpec{Image: "busybox"}}))
	denied("alice creates a guest", err)
	_, err = alice.nodes.CreateJoinToken(ctx, connect.NewRequest(&corpusv1.CreateJoinTokenRequest{}))
	denied("alice makes a join token", err)
	_, err = alice.users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: "mallory", Role: "ops"}))
	denied("alice creates a user", err)
	_, err = val.guests.StopGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "hello-dev"}))
	denied("val stops hello-dev", err)
	_, err = val.project.GetProject(ctx, connect.NewRequest(&corpusv1.GetProjectRequest{Name: "hello"}))
	allowed("val reads hello", err)
	// Logs: devs of granted projects (the node then answers), viewers
	// none.
	projectLogs := func(c clients, project string) error {
		return firstMessage(c.guests.GuestLogs(ctx, connect.NewRequest(&corpusv1.GuestLogsRequest{Name: project + "-dev"})))
	}
	allowed("alice reads hello-dev's logs", projectLogs(alice, "hello"))
	denied("alice reads other-dev's logs", projectLogs(alice, "other"))
	denied("val reads hello-dev's logs", projectLogs(val, "hello"))
	denied("alice reads other's project logs", firstMessage(alice.project.ProjectLogs(ctx, connect.NewRequest(&corpusv1.ProjectLogsRequest{Project: "other"}))))
	if v := s.Store().Read().GuestByName("other-dev"); v.DesiredState != "running" {
		t.Errorf("a denied call changed other-dev: %s", v.DesiredState)
	}

	// Config: devs set and reveal their projects' values; viewers see
	// keys only; nobody else touches them; a rotation keeps them.
	setConfig := func(c clients, project string, set map[string]string) error {
		stream, err := c.project.SetConfig(ctx, connect.NewRequest(&corpusv1.SetConfigRequest{Project: project, Set: set, NoRestart: true}))
		if err != nil {
			return err
		}
		defer stream.Close()
		for stream.Receive() {
		}
		return stream.Err()
	}
	if err := setConfig(alice, "hello", map[string]string{"DB_PASSWORD": "hunter2-planted"}); err != nil {
		t.Fatalf("alice sets hello's config: %v", err)
	}
	denied("alice sets other's config", setConfig(alice, "other", map[string]string{"A": "1"}))
	denied("val sets hello's config", setConfig(val, "hello", map[string]string{"A": "1"}))
	reveal := func(c clients, project string, reveal bool) (*corpusv1.GetConfigResponse, error) {
		res, err := c.project.GetConfig(ctx, connect.NewRequest(&corpusv1.GetConfigRequest{Project: project, Reveal: reveal}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	if got, err := reveal(alice, "hello", true); err != nil || len(got.Vars) != 1 || got.Vars[0].Value != "hunter2-planted" {
		t.Errorf("alice reveals hello's config = %v, %v", got, err)
	}
	if got, err := reveal(val, "hello", false); err != nil || len(got.Vars) != 1 || got.Vars[0].Key != "DB_PASSWORD" || got.Vars[0].Value != "" || got.Vars[0].Bytes != 15 {
		t.Errorf("val lists hello's config = %v, %v; want the key alone", got, err)
	}
	_, err = reveal(val, "hello", true)
	denied("val reveals hello's config", err)
	_, err = reveal(alice, "other", false)
	denied("alice lists other's config", err)
	// Extensions are the operators' alone; linting a push is an agent's.
	ext := &corpusv1.Extension{Name: "mine", Url: "https://hooks.example/x", Kind: "validate", On: []string{"guest.create"}}
	for who, c := range map[string]clients{"alice": alice, "val": val} {
		_, err := c.ext.AddExtension(ctx, connect.NewRequest(&corpusv1.AddExtensionRequest{Extension: ext}))
		denied(who+" adds an extension", err)
		_, err = c.ext.ListExtensions(ctx, connect.NewRequest(&corpusv1.ListExtensionsRequest{}))
		denied(who+" lists extensions", err)
		_, err = c.ext.DeleteExtension(ctx, connect.NewRequest(&corpusv1.DeleteExtensionRequest{Name: "mine"}))
		denied(who+" deletes an extension", err)
		_, err = c.agent.LintPush(ctx, connect.NewRequest(&corpusv1.LintPushRequest{Project: "hello", Env: "dev"}))
		denied(who+" lints a push", err)
	}
	_, err = ops.agent.LintPush(ctx, connect.NewRequest(&corpusv1.LintPushRequest{Project: "hello", Env: "dev"}))
	denied("ops lints a push as if an agent", err)
	_, err = ops.ext.AddExtension(ctx, connect.NewRequest(&corpusv1.AddExtensionRequest{Extension: ext}))
	allowed("ops adds an extension", err)
	_, err = ops.ext.DeleteExtension(ctx, connect.NewRequest(&corpusv1.DeleteExtensionRequest{Name: "mine"}))
	allowed("ops deletes it", err)

	// The dashboard's reads: every user waits on the index and reads
	// the plots; nobody without a credential does.
	for who, c := range map[string]clients{"alice": alice, "val": val} {
		w, err := c.cluster.Wait(ctx, connect.NewRequest(&corpusv1.WaitRequest{AfterIndex: 0}))
		if err != nil || w.Msg.Index == 0 {
			t.Errorf("%s waits on the index = %v, %v", who, w, err)
		}
		_, err = c.cluster.Series(ctx, connect.NewRequest(&corpusv1.SeriesRequest{}))
		allowed(who+" reads the series", err)
	}
	if _, err := s.clients("").cluster.Wait(ctx, connect.NewRequest(&corpusv1.WaitRequest{})); codeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("Wait without a credential = %v, want Unauthenticated", err)
	}
	_, err = alice.cluster.RotateKeyring(ctx, connect.NewRequest(&corpusv1.RotateKeyringRequest{}))
	denied("alice rotates the keyring", err)
	rot, err := ops.cluster.RotateKeyring(ctx, connect.NewRequest(&corpusv1.RotateKeyringRequest{}))
	if err != nil || rot.Msg.Previous == "" || rot.Msg.Resealed != 1 {
		t.Fatalf("ops rotates the keyring = %v, %v", rot, err)
	}
	if got, err := reveal(ops, "hello", true); err != nil || len(got.Vars) != 1 || got.Vars[0].Value != "hunter2-planted" {
		t.Errorf("hello's config after a rotation = %v, %v", got, err)
	}
	if kr := s.Store().Read().Keyring(); kr == nil || len(kr.Keys) != 1 || kr.Primary != rot.Msg.Primary {
		t.Errorf("keyring after a rotation = %v", kr)
	}

	// Tokens are personal.
	mine, err := alice.users.ListTokens(ctx, connect.NewRequest(&corpusv1.ListTokensRequest{}))
	if err != nil || len(mine.Msg.Tokens) != 1 || mine.Msg.Tokens[0].User != "alice" || mine.Msg.Tokens[0].SecretHash != "" {
		t.Errorf("alice's tokens = %v, %v", mine, err)
	}
	_, err = alice.users.ListTokens(ctx, connect.NewRequest(&corpusv1.ListTokensRequest{User: "val"}))
	denied("alice lists val's tokens", err)
	_, err = alice.users.CreateToken(ctx, connect.NewRequest(&corpusv1.CreateTokenRequest{User: "val"}))
	denied("alice makes a token for val", err)
	extra, err := alice.users.CreateToken(ctx, connect.NewRequest(&corpusv1.CreateTokenRequest{User: "alice", TtlSeconds: 3600}))
	if err != nil || !strings.HasPrefix(extra.Msg.Token, "cusr_") {
		t.Fatalf("alice makes her own token = %v, %v", extra, err)
	}
	st, err := s.clients(extra.Msg.Token).cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{}))
	if err != nil || st.Msg.Who != "user:alice" {
		t.Errorf("Status with alice's new token = %v, %v", st, err)
	}

	// A revoked token's open call ends at once.
	blocked := make(chan error, 1)
	g := s.Store().Read().GuestByName("hello-dev")
	go func() {
		_, err := s.clients(extra.Msg.Token).guests.GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: "hello-dev", MinIndex: g.ModifyIndex + 1000, WaitSeconds: 60}))
		blocked <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if _, err := ops.users.RevokeToken(ctx, connect.NewRequest(&corpusv1.RevokeTokenRequest{Id: extra.Msg.Info.Id})); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-blocked:
		if err == nil {
			t.Errorf("a blocking read with a revoked token answered normally")
		}
	case <-time.After(testrun.D(5 * time.Second)):
		t.Errorf("a blocking read with a revoked token did not end")
	}
	if _, err := s.clients(extra.Msg.Token).cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{})); codeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a revoked token = %v, want Unauthenticated", err)
	}
	// Deleting a user ends their tokens.
	if _, err := ops.users.DeleteUser(ctx, connect.NewRequest(&corpusv1.DeleteUserRequest{Name: "val"})); err != nil {
		t.Fatal(err)
	}
	if _, err := val.cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{})); codeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a deleted user's token = %v, want Unauthenticated", err)
	}
}
