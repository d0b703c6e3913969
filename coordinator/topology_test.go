package coordinator_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestProjectExportImport: a project's topology is exported (values only
// to those who may reveal them) and imported as a clone, renamed; a bad
// or conflicting topology changes nothing.
func TestProjectExportImport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, t.TempDir())
	s.enroll("n1").report(t)
	ops := s.ops()
	if _, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: "site", Env: "dev", Domains: []string{"site.example.test"}, Https: true, VolumeBytes: 2 << 30})); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "site-db", Template: "postgresql"})); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "site-pay", ExternalUrl: "https://pay.example.test", Secrets: map[string]string{"API_KEY": "k1"}})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("the database placed", func(v *state.Snap) bool { return v.GuestByName("svc-site-db").GetAddress() != "" })
	for _, svc := range []string{"site-db", "site-pay"} {
		if err := drain(ops.service.LinkService(ctx, connect.NewRequest(&corpusv1.LinkServiceRequest{Service: svc, Project: "site", Env: "dev"}))); err != nil {
			t.Fatalf("linking %s: %v", svc, err)
		}
	}
	if err := drain(ops.project.SetConfig(ctx, connect.NewRequest(&corpusv1.SetConfigRequest{Project: "site", Env: "dev", Set: map[string]string{"FOO": "bar"}}))); err != nil {
		t.Fatal(err)
	}

	if _, err := ops.project.Scale(ctx, connect.NewRequest(&corpusv1.ScaleRequest{Project: "site", Counts: map[string]uint32{"web": 2, "worker": 1}, SharedNothing: true, MaxParallel: 2})); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.project.Autoscale(ctx, connect.NewRequest(&corpusv1.AutoscaleRequest{Project: "site", Process: "web", Min: 2, Max: 4, TargetRps: 100})); err != nil {
		t.Fatal(err)
	}
	plain, err := ops.project.ExportProject(ctx, connect.NewRequest(&corpusv1.ExportProjectRequest{Name: "site"}))
	if err != nil {
		t.Fatal(err)
	}
	top := plain.Msg.Topology
	if len(top.Environments) != 1 || len(top.Services) != 2 {
		t.Fatalf("export = %v", top)
	}
	e := top.Environments[0]
	if e.Scale["web"] != 2 || !e.SharedNothing || e.MaxParallel != 2 || e.Autoscale["web"].GetMax() != 4 {
		t.Errorf("exported scale = %v %v %v %v", e.Scale, e.SharedNothing, e.MaxParallel, e.Autoscale)
	}
	if e.Name != "dev" || !slices.Equal(e.Domains, []string{"site.example.test"}) || !e.Https || e.VolumeBytes != 2<<30 || !slices.Equal(e.ConfigKeys, []string{"FOO"}) || e.Config != nil {
		t.Errorf("exported environment = %v; want its shape, its own config key and no values", e)
	}
	db, pay := top.Services[0], top.Services[1]
	if db.Name != "site-db" || db.Template != "postgresql" || len(db.Links) != 1 || db.Links[0].As != "POSTGRESQL" || pay.ExternalUrl == "" || !slices.Equal(pay.SecretKeys, []string{"API_KEY"}) || pay.Secrets != nil {
		t.Errorf("exported services = %v, %v", db, pay)
	}
	viewer := s.clients(s.userToken("val", "viewer", 0))
	if _, err := ops.project.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: "site", User: "val"})); err != nil {
		t.Fatal(err)
	}
	if _, err := viewer.project.ExportProject(ctx, connect.NewRequest(&corpusv1.ExportProjectRequest{Name: "site", WithSecrets: true})); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a viewer exports values: %v, want PermissionDenied", err)
	}
	full, err := ops.project.ExportProject(ctx, connect.NewRequest(&corpusv1.ExportProjectRequest{Name: "site", WithSecrets: true}))
	if err != nil {
		t.Fatal(err)
	}
	withValues := full.Msg.Topology
	if withValues.Environments[0].Config["FOO"] != "bar" || withValues.Services[1].Secrets["API_KEY"] != "k1" {
		t.Errorf("export with secrets = %v", withValues)
	}

	count := func() int { v := s.Store().Read(); return len(v.Services()) + len(v.Projects()) + len(v.Guests()) }
	before := count()
	refused := func(what string, req *corpusv1.ImportProjectRequest, code connect.Code) {
		t.Helper()
		if _, err := ops.project.ImportProject(ctx, connect.NewRequest(req)); codeOf(err) != code {
			t.Errorf("%s: import = %v, want %v", what, err, code)
		}
		if n := count(); n != before {
			t.Errorf("%s: the import changed the state (%d objects, had %d)", what, n, before)
		}
	}
	refused("the same project again", &corpusv1.ImportProjectRequest{Topology: top}, connect.CodeAlreadyExists)
	refused("routed domains", &corpusv1.ImportProjectRequest{Topology: top, As: "site2"}, connect.CodeAlreadyExists)
	bad := proto.Clone(top).(*corpusv1.ProjectTopology)
	bad.Version = "corpus.project/v9"
	refused("an unknown version", &corpusv1.ImportProjectRequest{Topology: bad, As: "site2", WithoutDomains: true}, connect.CodeInvalidArgument)
	bad = proto.Clone(top).(*corpusv1.ProjectTopology)
	bad.Services[1].Template, bad.Services[1].ExternalUrl = "nosuchdb", ""
	refused("a half-valid file (its last service's template unknown)", &corpusv1.ImportProjectRequest{Topology: bad, As: "site2", WithoutDomains: true}, connect.CodeNotFound)
	bad = proto.Clone(top).(*corpusv1.ProjectTopology)
	bad.Environments[0].SharedNothing = false
	refused("several instances on one volume", &corpusv1.ImportProjectRequest{Topology: bad, As: "site2", WithoutDomains: true}, connect.CodeInvalidArgument)
	dry, err := ops.project.ImportProject(ctx, connect.NewRequest(&corpusv1.ImportProjectRequest{Topology: top, As: "site2", WithoutDomains: true, DryRun: true}))
	if err != nil || len(dry.Msg.Created) != 3 || count() != before {
		t.Errorf("dry run = %v, %v (%d objects, had %d)", dry, err, count(), before)
	}

	// A clone under another name, values included.
	res, err := ops.project.ImportProject(ctx, connect.NewRequest(&corpusv1.ImportProjectRequest{Topology: withValues, As: "site2", WithoutDomains: true}))
	if err != nil {
		t.Fatalf("import --as site2 = %v", err)
	}
	if got := strings.Join(res.Msg.Created, "; "); got != "environment site2/dev; service site2-db; service site2-pay; link site2-db -> site2/dev; link site2-pay -> site2/dev" {
		t.Errorf("created %s", got)
	}
	for _, name := range []string{"site2-db", "site2-pay"} {
		if got := s.Store().Read().Service(name).GetProject(); got != "site2" {
			t.Errorf("service %s of the clone belongs to %q, want site2", name, got)
		}
	}
	cfg, err := ops.project.GetConfig(ctx, connect.NewRequest(&corpusv1.GetConfigRequest{Project: "site2", Env: "dev", Reveal: true}))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, v := range cfg.Msg.Vars {
		got[v.Key] = v.Value
	}
	addr := s.Store().Read().GuestByName("svc-site2-db").GetAddress()
	if got["FOO"] != "bar" || got["SITE_PAY_API_KEY"] != "k1" || got["POSTGRESQL_HOST"] != addr || addr == "" {
		t.Errorf("the clone's config = %v; want FOO, the external service's secret and its own database", got)
	}
	p := s.Store().Read().Project("site2")
	if e := corpusv1.EnvNamed(p, "dev"); e == nil || len(e.Domains) != 0 || !e.Https || len(e.Instances) != 1 || e.Scale["web"] != 2 || e.Autoscale["web"].GetTargetRps() != 100 {
		t.Errorf("the clone's environment = %v", e)
	}

	// Another environment of the same project, from its dev, on a
	// staging node.
	n2 := s.enroll("n2")
	n2.report(t)
	if _, err := ops.nodes.SetNodeMode(ctx, connect.NewRequest(&corpusv1.SetNodeModeRequest{Name: "n2", Mode: "staging"})); err != nil {
		t.Fatal(err)
	}
	res, err = ops.project.ImportProject(ctx, connect.NewRequest(&corpusv1.ImportProjectRequest{Topology: top, Env: "staging", WithoutDomains: true}))
	if err != nil {
		t.Fatalf("import --env staging = %v", err)
	}
	if got := strings.Join(res.Msg.Created, "; "); !strings.Contains(got, "service site-db-staging") || !strings.Contains(got, "environment site/staging") {
		t.Errorf("created %s", got)
	}
}
