package state_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestNodeSubnetsAndGuestAddresses: nodes get distinct subnets in order,
// guests the lowest free address of their node's subnet (gateway skipped),
// and a freed address is given again.
func TestNodeSubnetsAndGuestAddresses(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(cluster()...)
	r.must(tokenCmd("tok2", "h2", epoch.Add(time.Hour)), enrollCmd("tok2", "h2", "n2id", "n2"), updateNodeCmd("n2id", 8<<30))
	v := r.store.Read()
	if got := v.Node(nodeID).GuestSubnet; got != "10.210.0.0/24" {
		t.Errorf("first node subnet = %q, want 10.210.0.0/24", got)
	}
	if got := v.Node("n2id").GuestSubnet; got != "10.210.1.0/24" {
		t.Errorf("second node subnet = %q, want 10.210.1.0/24", got)
	}
	for i, want := range []string{"10.210.0.2", "10.210.0.3", "10.210.0.4"} {
		id, name := fmt.Sprintf("g%did", i), fmt.Sprintf("g%d", i)
		r.must(guestCmd(id, name))
		r.must(placeCmd(id, nodeID, "", 0))
		if got := r.store.Read().Guest(id).Address; got != want {
			t.Errorf("address of guest %d = %q, want %q", i, got, want)
		}
	}
	// Delete g0 (placed: desired deleted, then the agent confirms).
	r.must(desiredCmd("g0", state.DesiredDeleted), reportCmd(nodeID, "g0id", state.ObservedDeleted, ""))
	r.must(guestCmd("g9id", "g9"), placeCmd("g9id", nodeID, "", 0))
	if got := r.store.Read().Guest("g9id").Address; got != "10.210.0.2" {
		t.Errorf("address after a delete = %q, want the freed 10.210.0.2", got)
	}
}

// TestRoutes: domains are unique, tcp ports unique per node and clear of
// NAT ports, routes move atomically and go away with their guest.
func TestRoutes(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(withPlacedGuest()...)
	route := func(id string, kind corpusv1.RouteKind, domain string, port int32, guest string) *corpusv1.Command {
		return &corpusv1.Command{Cmd: &corpusv1.Command_CreateRoute{CreateRoute: &corpusv1.CreateRoute{Route: &corpusv1.Route{
			Id: id, Kind: string(kind), Domain: domain, ListenPort: port, GuestId: guest, GuestPort: 80,
		}}}}
	}
	r.must(route("r1", corpusv1.RouteHTTP, "web.example.test", 0, guestID))
	r.must(route("r2", corpusv1.RouteTCP, "", 5432, guestID))
	for _, tc := range []struct {
		name string
		cmd  *corpusv1.Command
		want error
	}{
		{"domain taken", route("r3", corpusv1.RouteHTTP, "web.example.test", 0, guestID), state.ErrExists},
		{"port taken", route("r3", corpusv1.RouteTCP, "", 5432, guestID), state.ErrPortTaken},
		{"bad kind", route("r3", "udp", "", 53, guestID), state.ErrInvalid},
		{"unknown guest", route("r3", corpusv1.RouteHTTP, "x.test", 0, "nope"), state.ErrNotFound},
		{"bad port", route("r3", corpusv1.RouteTCP, "", 70000, guestID), state.ErrInvalid},
	} {
		before := r.dump()
		if err := r.apply(tc.cmd); !errors.Is(err, tc.want) {
			t.Errorf("%s: Apply = %v, want %v", tc.name, err, tc.want)
		}
		if after := r.dump(); !proto.Equal(before, after) {
			t.Errorf("%s: a refused route changed the state", tc.name)
		}
	}
	// A guest whose NAT port is taken by the tcp route is not placed there.
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_CreateGuest{CreateGuest: &corpusv1.CreateGuest{Guest: &corpusv1.Guest{
		Id: "dbid", Name: "db", DesiredState: state.DesiredRunning,
		Spec: &corpusv1.GuestSpec{Driver: "lxc", Image: "busybox", Ports: []*corpusv1.Port{{HostPort: 5432, GuestPort: 5432, Protocol: "tcp"}}},
	}}}})
	if err := r.apply(placeCmd("dbid", nodeID, "", 0)); !errors.Is(err, state.ErrPortTaken) {
		t.Errorf("placing a guest on a taken NAT port = %v, want ErrPortTaken", err)
	}

	// Move r1 to another guest, then delete that guest: its routes go.
	r.must(guestCmd("g2id", "g2"), placeCmd("g2id", nodeID, "", 0))
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_MoveRoute{MoveRoute: &corpusv1.MoveRoute{Id: "r1", GuestName: "g2"}}})
	if got := r.store.Read().Route("r1"); got.GuestId != "g2id" || got.GuestName != "g2" || got.GuestPort != 80 {
		t.Errorf("moved route = %v, want it on g2 port 80", got)
	}
	r.must(desiredCmd("g2", state.DesiredDeleted), reportCmd(nodeID, "g2id", state.ObservedDeleted, ""))
	if got := r.store.Read().Route("r1"); got != nil {
		t.Errorf("route of a deleted guest = %v, want it removed", got)
	}
	if got := r.store.Read().Route("r2"); got == nil {
		t.Errorf("route r2 of guest web disappeared")
	}
}
