package coordinator_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestRouteTakesTheImagePort: an http route made without a guest port
// points at the one tcp port the guest's image exposes, as its agent
// reported it; an image exposing several, or none, or not started yet,
// is refused naming why, and nothing is written.
func TestRouteTakesTheImagePort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, t.TempDir())
	ops := s.ops()
	a := s.enroll("n1")
	a.report(t)
	create := func(name, image string) string {
		t.Helper()
		if _, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: name, Spec: &corpusv1.GuestSpec{Image: image}})); err != nil {
			t.Fatalf("CreateGuest(%s) = %v", name, err)
		}
		s.waitFor(name+" placed", func(v *state.Snap) bool { return v.GuestByName(name).GetNodeId() != "" })
		return s.Store().Read().GuestByName(name).Id
	}
	route := func(guest, domain string) (*corpusv1.CreateRouteResponse, error) {
		res, err := ops.ingress.CreateRoute(ctx, connect.NewRequest(&corpusv1.CreateRouteRequest{Kind: string(corpusv1.RouteHTTP), Domain: domain, GuestName: guest}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	app := create("app", "registry.example.test/team/app:1")
	multi := create("multi", "registry.example.test/team/web:2")
	bare := create("bare", "registry.example.test/team/batch:3")
	create("built", "busybox")

	// Before its agent says what the image exposes.
	if _, err := route("app", "app.example.test"); codeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "--port") {
		t.Errorf("a route to a guest not started yet = %v; want FailedPrecondition asking for --port", err)
	}
	ran := func(id string, ports ...string) *corpusv1.ReportedGuest {
		r := observed(id, state.ObservedRunning)
		r.Observed.ImageDigest, r.Observed.ImagePorts = "sha256:"+strings.Repeat("a", 64), ports
		return r
	}
	a.report(t, ran(app, "8080/tcp", "9125/udp"), ran(multi, "80/tcp", "443/tcp"), ran(bare))
	if got := s.Store().Read().GuestByName("app").GetObserved().GetImagePorts(); len(got) != 2 {
		t.Fatalf("app's image ports as stored = %q; want the two reported", got)
	}

	res, err := route("app", "app.example.test")
	if err != nil || res.Route.GetGuestPort() != 8080 || !res.Created {
		t.Fatalf("a route to app without a port = %v, %v; want one made to its image's 8080", res, err)
	}
	// Asked again, with or without the port, it is the same route.
	again, err := ops.ingress.CreateRoute(ctx, connect.NewRequest(&corpusv1.CreateRouteRequest{Kind: string(corpusv1.RouteHTTP), Domain: "app.example.test", GuestName: "app", GuestPort: 8080}))
	if err != nil || again.Msg.Created || again.Msg.Route.GetId() != res.Route.Id {
		t.Errorf("the route again with --port 8080 = %v, %v; want the same one", again, err)
	}
	for _, tc := range []struct {
		guest, want string
	}{
		{"multi", "80/tcp, 443/tcp"},
		{"bare", "exposes no tcp port"},
		{"built", "runs no OCI image"},
	} {
		before := len(s.Store().Read().Routes())
		_, err := route(tc.guest, tc.guest+".example.test")
		if codeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--port") {
			t.Errorf("a route to %s without a port = %v; want InvalidArgument saying %q and asking for --port", tc.guest, err, tc.want)
		}
		if after := len(s.Store().Read().Routes()); after != before {
			t.Errorf("the refused route to %s changed the routes: %d, then %d", tc.guest, before, after)
		}
	}
	// A tcp route still needs its guest port.
	if _, err := ops.ingress.CreateRoute(ctx, connect.NewRequest(&corpusv1.CreateRouteRequest{Kind: string(corpusv1.RouteTCP), ListenPort: 9000, GuestName: "app"})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a tcp route without a guest port = %v; want InvalidArgument", err)
	}
}
