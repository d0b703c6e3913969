package coordinator_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"corpus/coordinator/state"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
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
	if err == nil || !strings.Contains(err.Error(), "may not use project other") || !strings.Contains(err.Error(), "corpus project grant other alice") {
		t.Errorf("alice stops other-dev = %v, want it to name the project and how it is granted", err)
	}
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
	// Registries' credentials serve every project: the operators' alone;
	// an agent gets them opened, an operator never does.
	for who, c := range map[string]clients{"alice": alice, "val": val} {
		_, err := c.reg.Login(ctx, connect.NewRequest(&corpusv1.RegistryLoginRequest{Host: "registry.example.test", Username: "u", Password: "p"}))
		denied(who+" logs in to a registry", err)
		_, err = c.reg.ListRegistries(ctx, connect.NewRequest(&corpusv1.ListRegistriesRequest{}))
		denied(who+" lists registries", err)
		_, err = c.reg.Logout(ctx, connect.NewRequest(&corpusv1.RegistryLogoutRequest{Host: "registry.example.test"}))
		denied(who+" logs out of a registry", err)
	}
	_, err = ops.agent.RegistryCredentials(ctx, connect.NewRequest(&corpusv1.RegistryCredentialsRequest{Host: "registry.example.test"}))
	denied("ops reads a registry's credentials as if an agent", err)
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
	// A session's token is made with a token of its own user.
	if _, err := ops.users.CreateToken(ctx, connect.NewRequest(&corpusv1.CreateTokenRequest{User: "alice", Session: true})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a session token made with the operator token = %v, want InvalidArgument", err)
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

// TestServiceBackupExtensionRoles: every call on services, their
// backups (and volumes'), and extensions, made by an operator, a dev
// granted the service's project, a dev granted another project and a
// viewer granted the service's project: who may make it and who is
// refused. Services belong to projects; extensions and volumes' backups
// are the operators'.
func TestServiceBackupExtensionRoles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, t.TempDir())
	n1 := s.enroll("n1")
	n1.report(t)
	ops := s.ops()
	for _, p := range []struct{ name, env string }{{"hello", "dev"}, {"hello", "staging"}, {"other", "dev"}} {
		if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: p.name, Env: p.env})); err != nil {
			t.Fatal(err)
		}
	}
	callers := map[string]clients{
		"ops":   ops,
		"alice": s.clients(s.userToken("alice", "dev", 0)),
		"bob":   s.clients(s.userToken("bob", "dev", 0)),
		"val":   s.clients(s.userToken("val", "viewer", 0)),
	}
	for _, g := range []struct{ project, user string }{{"hello", "alice"}, {"hello", "val"}, {"other", "bob"}} {
		if _, err := ops.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: g.project, User: g.user})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ops.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "hdb", Template: "postgresql", Project: "hello"})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("hdb and hello-dev placed", func(v *state.Snap) bool {
		return v.GuestByName("svc-hdb").GetAddress() != "" && v.GuestByName("hello-dev").GetNodeId() != ""
	})
	if err := drain(ops.service.LinkService(ctx, connect.NewRequest(&corpusv1.LinkServiceRequest{Service: "hdb", Project: "hello", Env: "dev", As: "DATABASE"}))); err != nil {
		t.Fatal(err)
	}
	// importBackup sends a backup of hdb; the node that would keep it
	// does not answer, so it is recorded as failed: a backup to export
	// and delete.
	importBackup := func(c clients) error {
		st := c.service.ImportBackup(ctx)
		st.Send(&corpusv1.BackupChunk{Backup: &corpusv1.Backup{Service: "hdb", Sha256: strings.Repeat("0", 64)}})
		st.Send(&corpusv1.BackupChunk{Data: []byte("dump")})
		_, err := st.CloseAndReceive()
		return err
	}
	var used []string // the failed backups handed out
	failedBackup := func() string {
		t.Helper()
		before := len(s.Store().Read().Backups("hdb"))
		importBackup(ops)
		all := s.Store().Read().Backups("hdb")
		if len(all) != before+1 {
			t.Fatalf("an import left %d backups of hdb, had %d", len(all), before)
		}
		for _, b := range all {
			if b.Status == corpusv1.BackupFailed && !slices.Contains(used, b.Id) {
				used = append(used, b.Id)
				return b.Id
			}
		}
		t.Fatalf("no new failed backup among %v", all)
		return ""
	}
	exported := failedBackup()

	type row struct {
		proc    string
		call    func(c clients) error
		allowed []string
	}
	hello := []string{"ops", "alice"}
	readers := []string{"ops", "alice", "val"}
	everyone := []string{"ops", "alice", "bob", "val"}
	opsOnly := []string{"ops"}
	// Each allowed call fails after the checks of who may make it, or
	// changes nothing the next rows need.
	rows := []row{
		{corpusv1connect.ServiceServiceListTemplatesProcedure, func(c clients) error {
			_, err := c.service.ListTemplates(ctx, connect.NewRequest(&corpusv1.ListTemplatesRequest{}))
			return err
		}, everyone},
		{corpusv1connect.ServiceServiceCreateServiceProcedure, func(c clients) error {
			_, err := c.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "x", Template: "no-such-template", Project: "hello"}))
			return err
		}, hello},
		{corpusv1connect.ServiceServiceCreateServiceProcedure + " (no project)", func(c clients) error {
			_, err := c.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "x", Template: "no-such-template"}))
			return err
		}, opsOnly},
		{corpusv1connect.ServiceServiceCreateServiceProcedure + " (external, no project)", func(c clients) error {
			_, err := c.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "x", ExternalUrl: "not a url"}))
			return err
		}, opsOnly},
		{corpusv1connect.ServiceServiceListServicesProcedure, func(c clients) error {
			_, err := c.service.ListServices(ctx, connect.NewRequest(&corpusv1.ListServicesRequest{}))
			return err
		}, everyone},
		{corpusv1connect.ServiceServiceGetServiceProcedure, func(c clients) error {
			_, err := c.service.GetService(ctx, connect.NewRequest(&corpusv1.GetServiceRequest{Name: "hdb"}))
			return err
		}, readers},
		{corpusv1connect.ServiceServiceStopServiceProcedure, func(c clients) error {
			_, err := c.service.StopService(ctx, connect.NewRequest(&corpusv1.ServiceActionRequest{Name: "hdb"}))
			return err
		}, hello},
		{corpusv1connect.ServiceServiceStartServiceProcedure, func(c clients) error {
			_, err := c.service.StartService(ctx, connect.NewRequest(&corpusv1.ServiceActionRequest{Name: "hdb"}))
			return err
		}, hello},
		{corpusv1connect.ServiceServiceResizeServiceProcedure, func(c clients) error {
			_, err := c.service.ResizeService(ctx, connect.NewRequest(&corpusv1.ResizeServiceRequest{Name: "hdb", SizeBytes: 1}))
			return err
		}, hello},
		{corpusv1connect.ServiceServiceUpdateServiceProcedure, func(c clients) error {
			_, err := c.service.UpdateService(ctx, connect.NewRequest(&corpusv1.UpdateServiceRequest{Name: "hdb", BackupSchedule: "yearly"}))
			return err
		}, hello},
		{corpusv1connect.ServiceServiceLinkServiceProcedure, func(c clients) error {
			return drain(c.service.LinkService(ctx, connect.NewRequest(&corpusv1.LinkServiceRequest{Service: "hdb", Project: "hello", Env: "dev", As: "not valid"})))
		}, hello},
		{corpusv1connect.ServiceServiceLinkServiceProcedure + " (to another project)", func(c clients) error {
			return drain(c.service.LinkService(ctx, connect.NewRequest(&corpusv1.LinkServiceRequest{Service: "hdb", Project: "other", Env: "dev", As: "not valid"})))
		}, opsOnly},
		{corpusv1connect.ServiceServiceUnlinkServiceProcedure, func(c clients) error {
			return drain(c.service.UnlinkService(ctx, connect.NewRequest(&corpusv1.UnlinkServiceRequest{Service: "hdb", Project: "hello", Env: "staging"})))
		}, hello},
		{corpusv1connect.ServiceServiceDeleteServiceProcedure, func(c clients) error {
			_, err := c.service.DeleteService(ctx, connect.NewRequest(&corpusv1.DeleteServiceRequest{Name: "hdb"}))
			return err
		}, hello},
		{corpusv1connect.ServiceServiceBackupServiceProcedure, func(c clients) error {
			return drain(c.service.BackupService(ctx, connect.NewRequest(&corpusv1.BackupServiceRequest{Name: "hdb"})))
		}, hello},
		{corpusv1connect.ServiceServiceListBackupsProcedure, func(c clients) error {
			_, err := c.service.ListBackups(ctx, connect.NewRequest(&corpusv1.ListBackupsRequest{Service: "hdb"}))
			return err
		}, readers},
		{corpusv1connect.ServiceServiceRestoreServiceProcedure, func(c clients) error {
			return drain(c.service.RestoreService(ctx, connect.NewRequest(&corpusv1.RestoreServiceRequest{Name: "hdb"})))
		}, hello},
		{corpusv1connect.ServiceServiceExportBackupProcedure, func(c clients) error {
			return drain(c.service.ExportBackup(ctx, connect.NewRequest(&corpusv1.ExportBackupRequest{Id: exported})))
		}, hello},
		{corpusv1connect.ServiceServiceImportBackupProcedure, importBackup, hello},
		{corpusv1connect.ServiceServiceDeleteBackupProcedure, func(c clients) error {
			_, err := c.service.DeleteBackup(ctx, connect.NewRequest(&corpusv1.DeleteBackupRequest{Id: failedBackup()}))
			return err
		}, hello},
		{corpusv1connect.VolumeServiceBackupVolumeProcedure, func(c clients) error {
			return drain(c.volumes.BackupVolume(ctx, connect.NewRequest(&corpusv1.BackupVolumeRequest{Name: "hello-dev"})))
		}, opsOnly},
		{corpusv1connect.VolumeServiceRestoreVolumeProcedure, func(c clients) error {
			return drain(c.volumes.RestoreVolume(ctx, connect.NewRequest(&corpusv1.RestoreVolumeRequest{Name: "hello-dev"})))
		}, opsOnly},
		{corpusv1connect.VolumeServiceUpdateVolumeProcedure, func(c clients) error {
			_, err := c.volumes.UpdateVolume(ctx, connect.NewRequest(&corpusv1.UpdateVolumeRequest{Name: "hello-dev", BackupSchedule: "yearly"}))
			return err
		}, opsOnly},
		{corpusv1connect.NodeServiceListImagesProcedure, func(c clients) error {
			_, err := c.nodes.ListImages(ctx, connect.NewRequest(&corpusv1.ListImagesRequest{Node: "nope"}))
			return err
		}, opsOnly},
		{corpusv1connect.NodeServiceRemoveImageProcedure, func(c clients) error {
			_, err := c.nodes.RemoveImage(ctx, connect.NewRequest(&corpusv1.RemoveImageRequest{Node: "nope", Image: "busybox"}))
			return err
		}, opsOnly},
		{corpusv1connect.NodeServicePruneImagesProcedure, func(c clients) error {
			_, err := c.nodes.PruneImages(ctx, connect.NewRequest(&corpusv1.PruneImagesRequest{Node: "nope"}))
			return err
		}, opsOnly},
		{corpusv1connect.SnapshotServiceRestoreSnapshotProcedure, func(c clients) error {
			s := c.snap.RestoreSnapshot(ctx)
			s.Send(&corpusv1.RestoreSnapshotRequest{}) // no header: refused after the role check
			_, err := s.CloseAndReceive()
			return err
		}, opsOnly},
		{corpusv1connect.ExtensionServiceAddExtensionProcedure, func(c clients) error {
			_, err := c.ext.AddExtension(ctx, connect.NewRequest(&corpusv1.AddExtensionRequest{Extension: &corpusv1.Extension{Name: "x", Url: "not a url"}}))
			return err
		}, opsOnly},
		{corpusv1connect.ExtensionServiceListExtensionsProcedure, func(c clients) error {
			_, err := c.ext.ListExtensions(ctx, connect.NewRequest(&corpusv1.ListExtensionsRequest{}))
			return err
		}, opsOnly},
		{corpusv1connect.ExtensionServiceGetExtensionProcedure, func(c clients) error {
			_, err := c.ext.GetExtension(ctx, connect.NewRequest(&corpusv1.GetExtensionRequest{Name: "nope"}))
			return err
		}, opsOnly},
		{corpusv1connect.ExtensionServiceSetExtensionDisabledProcedure, func(c clients) error {
			_, err := c.ext.SetExtensionDisabled(ctx, connect.NewRequest(&corpusv1.SetExtensionDisabledRequest{Name: "nope", Disabled: true}))
			return err
		}, opsOnly},
		{corpusv1connect.ExtensionServiceDeleteExtensionProcedure, func(c clients) error {
			_, err := c.ext.DeleteExtension(ctx, connect.NewRequest(&corpusv1.DeleteExtensionRequest{Name: "nope"}))
			return err
		}, opsOnly},
	}
	// Every procedure of the services and extensions has its row.
	for _, name := range []protoreflect.FullName{corpusv1connect.ServiceServiceName, corpusv1connect.ExtensionServiceName} {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
		if err != nil {
			t.Fatal(err)
		}
		methods := d.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			proc := "/" + string(name) + "/" + string(methods.Get(i).Name())
			if !slices.ContainsFunc(rows, func(r row) bool { return r.proc == proc }) {
				t.Errorf("no row for %s: who may call it is untested", proc)
			}
		}
	}
	for _, r := range rows {
		for _, who := range slices.Sorted(maps.Keys(callers)) {
			err := r.call(callers[who])
			code := codeOf(err)
			switch refused := code == connect.CodePermissionDenied || code == connect.CodeUnauthenticated; {
			case slices.Contains(r.allowed, who) && refused:
				t.Errorf("%s by %s = %v, want it allowed", r.proc, who, err)
			case !slices.Contains(r.allowed, who) && code != connect.CodePermissionDenied:
				t.Errorf("%s by %s = %v, want PermissionDenied", r.proc, who, err)
			}
		}
	}
	// Lists show what each may see.
	for who, want := range map[string][]string{"ops": {"hdb"}, "alice": {"hdb"}, "val": {"hdb"}, "bob": nil} {
		l, err := callers[who].service.ListServices(ctx, connect.NewRequest(&corpusv1.ListServicesRequest{}))
		var got []string
		for _, v := range l.Msg.GetServices() {
			got = append(got, v.Service.Name)
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s's service list = %v, %v; want %v", who, got, err, want)
		}
	}
	if v := s.Store().Read(); v.Service("x") != nil || v.Service("hdb").GetDesiredState() != state.DesiredRunning || len(v.Service("hdb").GetLinks()) != 1 {
		t.Errorf("after the calls: service x %v, hdb %v; want no x and hdb running, linked", v.Service("x"), v.Service("hdb"))
	}
}
