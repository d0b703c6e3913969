package netns_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"corpus/netns"
	"corpus/netns/internal/nstest"
)

// TestEnsureRoutes: peers' subnets are routed via their addresses (on
// link) or via the route to them (not on link); a changed or dropped
// peer changes or removes only corpus's route; routes of others stay;
// a second pass changes nothing.
func TestEnsureRoutes(t *testing.T) {
	ns := nstest.New(t, "rt")
	h := netns.New(netns.Config{})
	// A link 10.9.0.1/24 (a veth whose peer stays here; on link:
	// 10.9.0.2) and a default route via 10.9.0.254 (off link: 10.8.0.2).
	for _, args := range [][]string{
		{"ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1"},
		{"ip", "addr", "add", "10.9.0.1/24", "dev", "up0"},
		{"ip", "link", "set", "up1", "up"},
		{"ip", "link", "set", "up0", "up"},
		{"ip", "route", "add", "default", "via", "10.9.0.254"},
		{"ip", "route", "add", "192.168.77.0/24", "via", "10.9.0.3"}, // someone else's
	} {
		if out, err := ns.Run(args...); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
	ensure := func(want ...netns.Route) bool {
		t.Helper()
		var changed bool
		ns.MustDo(func() (err error) { changed, err = h.EnsureRoutes(context.Background(), want); return err })
		return changed
	}
	routes := func() string {
		t.Helper()
		out, err := ns.Run("ip", "route", "show")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	r := func(dst, via string) netns.Route {
		return netns.Route{Dst: netip.MustParsePrefix(dst), Via: netip.MustParseAddr(via)}
	}
	if !ensure(r("10.210.1.0/24", "10.9.0.2"), r("10.210.2.0/24", "10.8.0.2")) {
		t.Error("the first pass changed nothing")
	}
	got := routes()
	for _, want := range []string{"10.210.1.0/24 via 10.9.0.2 dev up0 proto 199", "10.210.2.0/24 via 10.9.0.254 dev up0 proto 199", "192.168.77.0/24 via 10.9.0.3"} {
		if !strings.Contains(got, want) {
			t.Errorf("routes lack %q:\n%s", want, got)
		}
	}
	if ensure(r("10.210.1.0/24", "10.9.0.2"), r("10.210.2.0/24", "10.8.0.2")) {
		t.Error("a second pass changed something")
	}
	ensure(r("10.210.1.0/24", "10.9.0.5"))
	got = routes()
	if !strings.Contains(got, "10.210.1.0/24 via 10.9.0.5") || strings.Contains(got, "10.210.2.0/24") || !strings.Contains(got, "192.168.77.0/24") {
		t.Errorf("after a peer moved and one left:\n%s", got)
	}
	ensure()
	if got = routes(); strings.Contains(got, "10.210.") || !strings.Contains(got, "192.168.77.0/24") {
		t.Errorf("after every peer left:\n%s", got)
	}
}
