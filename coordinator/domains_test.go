package coordinator_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestDomainsCanonical: a domain is kept in one form whatever case,
// final dot or spaces around it the caller gives, and found again by
// any of them.
func TestDomainsCanonical(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, t.TempDir())
	s.enroll("n1").report(t)
	ops := s.ops()
	if _, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "web", Spec: &corpusv1.GuestSpec{Image: "busybox"}})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("web placed", func(v *state.Snap) bool { return v.GuestByName("web").GetNodeId() != "" })
	res, err := ops.ingress.CreateRoute(ctx, connect.NewRequest(&corpusv1.CreateRouteRequest{Kind: string(corpusv1.RouteHTTP), Domain: " Web.Example.TEST. ", GuestName: "web", GuestPort: 80}))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Msg.Route.GetDomain(); got != "web.example.test" {
		t.Errorf("CreateRoute(\" Web.Example.TEST. \") made a route for %q, want web.example.test", got)
	}
	again, err := ops.ingress.CreateRoute(ctx, connect.NewRequest(&corpusv1.CreateRouteRequest{Kind: string(corpusv1.RouteHTTP), Domain: "WEB.example.test", GuestName: "web", GuestPort: 80}))
	if err != nil || again.Msg.Created || again.Msg.Route.GetId() != res.Msg.Route.GetId() {
		t.Errorf("the route again as WEB.example.test = %v, %v; want the same route, not created", again, err)
	}
	if _, err := ops.ingress.CreateRoute(ctx, connect.NewRequest(&corpusv1.CreateRouteRequest{Kind: string(corpusv1.RouteTCP), Domain: " ", ListenPort: 9000, GuestName: "web", GuestPort: 80})); err != nil {
		t.Errorf("a tcp route with a blank domain = %v, want it made (no domain)", err)
	}
	if _, err := ops.ingress.DeleteRoute(ctx, connect.NewRequest(&corpusv1.DeleteRouteRequest{Domain: "web.EXAMPLE.test.\n"})); err != nil {
		t.Fatalf("DeleteRoute(web.EXAMPLE.test.) = %v, want the route deleted", err)
	}
	s.waitFor("the route deleted", func(v *state.Snap) bool { return v.RouteByDomain("web.example.test") == nil })
}
