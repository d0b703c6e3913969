package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestAuditTellsTheTruth: calls refused by a policy, by a credential and
// by validation are in the audit log with who was refused and why, a
// revoke is logged as a revoke, and a caller hammering the API leaves a
// bounded number of entries that say how many were left out.
func TestAuditTellsTheTruth(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	ctx := context.Background()
	ops := s.ops()
	dev := s.clients(s.userToken("dave", "dev", 0))

	// A policy refusal: devs may not create guests.
	_, err := dev.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "mine", Spec: &corpusv1.GuestSpec{Image: "busybox", Privileged: true}}))
	if codeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("dev CreateGuest = %v, want PermissionDenied", err)
	}
	e := lastAudit(t, s, "refused GuestService.CreateGuest")
	if e.Actor != "user:dave" || e.Target != "mine" || !strings.HasPrefix(e.Result, "refused: ") {
		t.Errorf("audit of a policy refusal = %v, want actor user:dave, target mine, a refused result", e)
	}

	// A validation refusal, before anything is proposed.
	_, err = ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "Bad_Name", Spec: &corpusv1.GuestSpec{Image: "busybox"}}))
	if codeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("CreateGuest with a bad name = %v, want InvalidArgument", err)
	}
	if e := lastAudit(t, s, "refused GuestService.CreateGuest"); e.Actor != "ops" || e.Target != "Bad_Name" {
		t.Errorf("audit of a validation refusal = %v, want actor ops, target Bad_Name", e)
	}

	// A bad credential is refused as anonymous.
	_, err = s.clients("cusr_nope_nope").guests.ListGuests(ctx, connect.NewRequest(&corpusv1.ListGuestsRequest{}))
	if codeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("ListGuests with a bad token = %v, want Unauthenticated", err)
	}
	if e := lastAudit(t, s, "refused GuestService.ListGuests"); e.Actor != "anonymous" {
		t.Errorf("audit of a bad credential = %v, want actor anonymous", e)
	}

	// Grant and revoke are told apart.
	if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "site"})); err != nil {
		t.Fatal(err)
	}
	for _, revoke := range []bool{false, true} {
		if _, err := ops.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: "site", User: "dave", Revoke: revoke})); err != nil {
			t.Fatalf("GrantProject(revoke=%v) = %v", revoke, err)
		}
	}
	if g, r := audit(t, s, "grant_project"), audit(t, s, "revoke_project"); len(g) != 1 || len(r) != 1 || r[0].Target != "site" {
		t.Errorf("grant then revoke left grants %v and revokes %v, want one of each", g, r)
	}

	// A flood of refusals leaves at most the burst, and the next entry
	// after the rate recovers counts what was left out.
	const flood = 100
	for range flood {
		dev.nodes.CreateJoinToken(ctx, connect.NewRequest(&corpusv1.CreateJoinTokenRequest{}))
	}
	got := audit(t, s, "refused NodeService.CreateJoinToken")
	if len(got) >= flood || len(got) == 0 {
		t.Errorf("%d refused calls left %d audit entries, want some and fewer", flood, len(got))
	}
	eventuallyT(t, "a later refusal counting the ones left out", func() error {
		dev.nodes.CreateJoinToken(ctx, connect.NewRequest(&corpusv1.CreateJoinTokenRequest{}))
		if e := lastAudit(t, s, "refused NodeService.CreateJoinToken"); !strings.Contains(e.Result, "earlier refusals") {
			return fmt.Errorf("last entry %v", e)
		}
		return nil
	})
}

// TestProjectLifecycle: a project's environment guest is deleted with
// its environment, never alone; a deleted project's volumes go with it
// unless kept; a project deleted can be created again.
func TestProjectLifecycle(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	ctx := context.Background()
	ops := s.ops()
	create := func() *corpusv1.CreateProjectResponse {
		t.Helper()
		res, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "site", Env: "prod"}))
		if err != nil {
			t.Fatalf("CreateProject = %v", err)
		}
		return res.Msg
	}
	p := create()
	guest := s.Store().Read().Guest(p.Project.Envs[0].GuestId).Name
	_, err := ops.guests.DeleteGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: guest}))
	if codeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "corpus project delete site --env prod") {
		t.Errorf("DeleteGuest of a project's guest = %v, want FailedPrecondition pointing at project delete", err)
	}
	if g := s.Store().Read().GuestByName(guest); g == nil || g.DesiredState == "deleted" {
		t.Errorf("the refused delete changed the guest: %v", g)
	}

	if _, err := ops.project.DeleteProject(ctx, connect.NewRequest(&corpusv1.DeleteProjectRequest{Name: "site", KeepVolumes: true})); err != nil {
		t.Fatal(err)
	}
	if g := s.Store().Read().GuestByName(guest); g != nil && (g.DesiredState != "deleted" || g.PurgeVolume) {
		t.Errorf("guest after project delete --keep-volumes = %v, want deleted with its volume kept", g)
	}
	// Without agents, the pending guest is gone at once; the name is free.
	s.waitFor("the old guest gone", func(v *state.Snap) bool { return v.GuestByName(guest) == nil })
	create()
	if g := s.Store().Read().GuestByName(guest); g.GetSpec().GetVolume().GetUseVolume() != guest {
		t.Errorf("re-created environment's guest = %v, want it to bind the kept volume %s", g.GetSpec().GetVolume(), guest)
	}
	if _, err := ops.project.DeleteProject(ctx, connect.NewRequest(&corpusv1.DeleteProjectRequest{Name: "site"})); err != nil {
		t.Fatal(err)
	}
	if g := s.Store().Read().GuestByName(guest); g != nil && !g.PurgeVolume {
		t.Errorf("guest after project delete = %v, want its volume purged", g)
	}
}

// TestRefusalsNameTheirTarget: a call refused by its policy or by its
// handler, unary or streaming (the request of a stream is read to name
// it), is in the audit log with the object it was about.
func TestRefusalsNameTheirTarget(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	ctx := context.Background()
	ops := s.ops()
	for _, p := range []string{"hello", "other"} {
		if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: p, Env: "dev"})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ops.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "hpay", ExternalUrl: "https://pay.example.test", Project: "hello"})); err != nil {
		t.Fatal(err)
	}
	val := s.clients(s.userToken("val", "viewer", 0))
	alice := s.clients(s.userToken("alice", "dev", 0))
	for _, u := range []string{"val", "alice"} {
		if _, err := ops.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: "hello", User: u})); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		who, action, target string
		call                func() error
	}{
		{"val", "GuestService.StopGuest", "hello-dev", func() error {
			_, err := val.guests.StopGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "hello-dev"}))
			return err
		}},
		{"val", "GuestService.ExecGuest", "hello-dev", func() error {
			return drain(val.guests.ExecGuest(ctx, connect.NewRequest(&corpusv1.ExecGuestRequest{Name: "hello-dev", Argv: []string{"true"}})))
		}},
		{"val", "GuestService.Shell", "hello-dev", func() error {
			st := val.guests.Shell(ctx)
			st.Send(&corpusv1.ShellInput{Open: &corpusv1.ExecGuestRequest{Name: "hello-dev", Argv: []string{"sh"}}})
			_, err := st.Receive()
			st.CloseRequest()
			st.CloseResponse()
			return err
		}},
		{"val", "ProjectService.SetConfig", "hello/dev", func() error {
			return drain(val.project.SetConfig(ctx, connect.NewRequest(&corpusv1.SetConfigRequest{Project: "hello", Env: "dev", Set: map[string]string{"A": "1"}})))
		}},
		{"val", "ServiceService.BackupService", "hpay", func() error {
			return drain(val.service.BackupService(ctx, connect.NewRequest(&corpusv1.BackupServiceRequest{Name: "hpay"})))
		}},
		{"val", "ServiceService.ImportBackup", "hpay", func() error {
			st := val.service.ImportBackup(ctx)
			st.Send(&corpusv1.BackupChunk{Backup: &corpusv1.Backup{Service: "hpay", Sha256: strings.Repeat("0", 64)}})
			_, err := st.CloseAndReceive()
			return err
		}},
		{"alice", "GuestService.StopGuest", "other-dev", func() error {
			_, err := alice.guests.StopGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "other-dev"}))
			return err
		}},
		{"alice", "ProjectService.Deploy", "other/dev", func() error {
			return drain(alice.project.Deploy(ctx, connect.NewRequest(&corpusv1.RedeployRequest{Project: "other", Env: "dev"})))
		}},
	} {
		if err := tc.call(); codeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%s's %s = %v, want PermissionDenied", tc.who, tc.action, err)
			continue
		}
		e := lastAudit(t, s, "refused "+tc.action)
		if e.Actor != "user:"+tc.who || e.Target != tc.target {
			t.Errorf("audit of %s's refused %s = %v, want target %q", tc.who, tc.action, e, tc.target)
		}
	}
}
