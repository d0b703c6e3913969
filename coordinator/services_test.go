package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestServiceRoles: services belong to projects: a dev makes them only
// in projects granted to them (a dev with no project makes none), a dev
// not granted the project neither sees nor uses them, they are linked
// only to projects the dev may use, and a link puts the template's
// variables in the environment's config (the secrets never shown by the
// service itself).
func TestServiceRoles(t *testing.T) {
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
	alice := s.clients(s.userToken("alice", "dev", 0))
	bob := s.clients(s.userToken("bob", "dev", 0))
	if _, err := ops.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: "hello", User: "alice"})); err != nil {
		t.Fatal(err)
	}
	// Nothing of a refused create is made: no service, no guest taking
	// a node's room.
	for _, tc := range []struct {
		who     string
		c       clients
		project string
	}{
		{"bob, granted nothing, in no project", bob, ""},
		{"bob, granted nothing, in hello", bob, "hello"},
		{"alice in no project", alice, ""},
		{"alice in a project not hers", alice, "other"},
	} {
		for _, req := range []*corpusv1.CreateServiceRequest{
			{Name: "mine", Template: "postgresql", Project: tc.project},
			{Name: "mine", ExternalUrl: "https://mine.example.test", Project: tc.project},
		} {
			if _, err := tc.c.service.CreateService(ctx, connect.NewRequest(req)); codeOf(err) != connect.CodePermissionDenied {
				t.Errorf("%s creates a service (template %q) = %v, want PermissionDenied", tc.who, req.Template, err)
			}
		}
	}
	if v := s.Store().Read(); v.Service("mine") != nil || v.GuestByName("svc-mine") != nil {
		t.Errorf("a refused create made service %q, guest %q", v.Service("mine").GetName(), v.GuestByName("svc-mine").GetName())
	}
	if _, err := alice.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "adb", Template: "postgresql", Project: "nope"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("alice creates a service in a project that does not exist = %v, want NotFound", err)
	}
	created, err := alice.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "adb", Template: "postgresql", Project: "hello"}))
	if err != nil {
		t.Fatal(err)
	}
	v := created.Msg.Service
	if v.Service.GuestName != "svc-adb" || v.Service.Project != "hello" || len(v.SecretKeys) != 1 || v.Service.Secrets != nil || v.Service.TemplateSpec.GetFiles() != nil {
		t.Errorf("created service = %v", v)
	}
	if _, err := alice.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "adb", Template: "postgresql", Project: "hello"})); err != nil {
		t.Errorf("the same create again = %v, want success", err)
	}
	s.waitFor("the service's guest placed", func(v *state.Snap) bool { return v.GuestByName("svc-adb").GetAddress() != "" })

	if _, err := bob.service.GetService(ctx, connect.NewRequest(&corpusv1.GetServiceRequest{Name: "adb"})); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("bob reads alice's service: %v, want PermissionDenied", err)
	}
	if l, err := bob.service.ListServices(ctx, connect.NewRequest(&corpusv1.ListServicesRequest{})); err != nil || len(l.Msg.Services) != 0 {
		t.Errorf("bob's service list = %v, %v; want none", l, err)
	}
	if _, err := bob.guests.StopGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "svc-adb"})); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("bob stops alice's service guest: %v, want PermissionDenied", err)
	}
	if _, err := ops.guests.DeleteGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "svc-adb"})); codeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("deleting the service's guest directly: %v, want FailedPrecondition", err)
	}
	link := func(c clients, project string) error {
		return drain(c.service.LinkService(ctx, connect.NewRequest(&corpusv1.LinkServiceRequest{Service: "adb", Project: project, As: "DATABASE"})))
	}
	if err := link(alice, "other"); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("alice links her service to a project not hers: %v, want PermissionDenied", err)
	}
	if err := link(bob, "hello"); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("bob links alice's service: %v, want PermissionDenied", err)
	}
	if err := link(alice, "hello"); err != nil {
		t.Fatalf("alice links her service to her project: %v", err)
	}
	cfg, err := alice.project.GetConfig(ctx, connect.NewRequest(&corpusv1.GetConfigRequest{Project: "hello", Reveal: true}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, v := range cfg.Msg.Vars {
		got[v.Key] = v.Value
	}
	addr := s.Store().Read().GuestByName("svc-adb").Address
	if !strings.HasPrefix(got["DATABASE_URL"], "postgres://corpus:") || !strings.HasSuffix(got["DATABASE_URL"], "@"+addr+":5432/corpus") || got["DATABASE_HOST"] != addr || len(got["DATABASE_PASSWORD"]) != 32 {
		t.Errorf("config after the link = %v", got)
	}
	// A link set by a service is not taken over by another's. An
	// operator's service of no project is the operators' alone, linked
	// or not.
	if _, err := ops.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "pay", ExternalUrl: "https://pay.example.test", Secrets: map[string]string{"API_KEY": "k"}})); err != nil {
		t.Fatal(err)
	}
	if err := drain(alice.service.LinkService(ctx, connect.NewRequest(&corpusv1.LinkServiceRequest{Service: "pay", Project: "hello"}))); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("alice links the operators' service: %v, want PermissionDenied", err)
	}
	if err := drain(ops.service.LinkService(ctx, connect.NewRequest(&corpusv1.LinkServiceRequest{Service: "pay", Project: "hello", As: "DATABASE"}))); codeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("linking another service under the same name: %v, want AlreadyExists", err)
	}
	if err := drain(ops.service.LinkService(ctx, connect.NewRequest(&corpusv1.LinkServiceRequest{Service: "pay", Project: "hello"}))); err != nil {
		t.Errorf("linking the external service: %v", err)
	}
	p, err := alice.project.GetProject(ctx, connect.NewRequest(&corpusv1.GetProjectRequest{Name: "hello"}))
	if err != nil || strings.Join(p.Msg.Project.Envs[0].Services, ",") != "adb (not started),pay (external)" {
		t.Errorf("project show's dependencies = %v, %v", p.Msg.GetProject().GetEnvs(), err)
	}
	if _, err := alice.service.DeleteService(ctx, connect.NewRequest(&corpusv1.DeleteServiceRequest{Name: "adb"})); codeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("deleting a linked service: %v, want FailedPrecondition", err)
	}
	// Linked to hello, pay is read by hello's dev, not acted on.
	if _, err := alice.service.GetService(ctx, connect.NewRequest(&corpusv1.GetServiceRequest{Name: "pay"})); err != nil {
		t.Errorf("alice reads the service linked to her project: %v", err)
	}
	if _, err := alice.service.StopService(ctx, connect.NewRequest(&corpusv1.ServiceActionRequest{Name: "pay"})); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("alice stops the operators' service: %v, want PermissionDenied", err)
	}
}
