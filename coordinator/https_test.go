package coordinator_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestHTTPSRoutes: an https route's certificate is shown with its
// route; a CA that cannot be reached fails the order visibly, with the
// next retry; only the node serving the domain gets its TLS material.
func TestHTTPSRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, t.TempDir())
	n1, n2 := s.enroll("n1"), s.enroll("n2")
	n1.report(t)
	n2.report(t)
	ops := s.ops()
	if _, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "web", Spec: &corpusv1.GuestSpec{Image: "busybox"}})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("web placed", func(v *state.Snap) bool { return v.GuestByName("web").GetNodeId() != "" })
	if _, err := ops.ingress.CreateRoute(ctx, connect.NewRequest(&corpusv1.CreateRouteRequest{Kind: string(corpusv1.RouteTCP), ListenPort: 9000, GuestName: "web", GuestPort: 80, Https: true})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("an https tcp route = %v, want InvalidArgument", err)
	}
	if _, err := ops.ingress.CreateRoute(ctx, connect.NewRequest(&corpusv1.CreateRouteRequest{Kind: string(corpusv1.RouteHTTP), Domain: "web.example.test", GuestName: "web", GuestPort: 80, Hsts: true})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("HSTS without HTTPS = %v, want InvalidArgument", err)
	}
	if _, err := ops.ingress.CreateRoute(ctx, connect.NewRequest(&corpusv1.CreateRouteRequest{Kind: string(corpusv1.RouteHTTP), Domain: "web.example.test", GuestName: "web", GuestPort: 80, Https: true, RedirectHttps: true})); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.ingress.RenewCertificate(ctx, connect.NewRequest(&corpusv1.RenewDomainCertificateRequest{Domain: "web.example.test"})); codeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("renew without an ACME account = %v, want FailedPrecondition", err)
	}
	// A directory nobody answers: the order fails, is shown, and retried later.
	if _, err := ops.ingress.SetAcme(ctx, connect.NewRequest(&corpusv1.SetAcmeRequest{DirectoryUrl: "https://127.0.0.1:1/dir"})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("the failed order recorded", func(v *state.Snap) bool { return v.Certificate("web.example.test").GetState() == state.CertFailed })
	list, err := ops.ingress.ListRoutes(ctx, connect.NewRequest(&corpusv1.ListRoutesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var cv *corpusv1.CertificateView
	for _, r := range list.Msg.Routes {
		if r.Route.Domain == "web.example.test" {
			cv = r.Certificate
		}
	}
	if cv == nil || cv.LastError == "" || cv.Failures != 1 || !cv.NextAttemptAt.AsTime().After(time.Now()) {
		t.Errorf("ingress list shows %v; want the failure, its error and a retry time ahead", cv)
	}
	acme, err := ops.ingress.GetAcme(ctx, connect.NewRequest(&corpusv1.GetAcmeRequest{}))
	if err != nil || acme.Msg.Acme.GetDirectoryUrl() != "https://127.0.0.1:1/dir" || len(acme.Msg.Acme.GetChallenges()) != 2 {
		t.Errorf("GetAcme = %v, %v", acme, err)
	}

	// TLS material: the serving node only.
	view := s.Store().Read()
	serving, other := n1, n2
	if view.GuestByName("web").NodeId == n2.id {
		serving, other = n2, n1
	}
	if _, err := serving.agent.TlsMaterial(ctx, connect.NewRequest(&corpusv1.TlsMaterialRequest{Domains: []string{"web.example.test"}})); err != nil {
		t.Errorf("TlsMaterial by the serving node = %v", err)
	}
	if _, err := other.agent.TlsMaterial(ctx, connect.NewRequest(&corpusv1.TlsMaterialRequest{Domains: []string{"web.example.test"}})); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("TlsMaterial by another node = %v, want PermissionDenied", err)
	}
	if _, err := serving.agent.TlsMaterial(ctx, connect.NewRequest(&corpusv1.TlsMaterialRequest{Domains: []string{"nope.example.test"}})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("TlsMaterial of an unknown domain = %v, want NotFound", err)
	}
}
