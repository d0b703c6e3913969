package cache

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	corpusv1 "corpus/proto/corpus/v1"
)

func TestCacheRoundTrip(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "agent.db")
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Identity(); !errors.Is(err, ErrNoIdentity) {
		t.Fatalf("Identity() on a new cache = %v, want ErrNoIdentity", err)
	}
	if _, ok, err := c.Desired(); ok || err != nil {
		t.Fatalf("Desired() on a new cache = ok %v, %v; want nothing stored", ok, err)
	}
	id := Identity{NodeID: "n1", NodeName: "node", KeyPEM: []byte("k"), CertPEM: []byte("c"), CAPEM: []byte("a"), ClusterID: "c", AgentKey: "k", Coordinator: "127.0.0.1:1", EnrolledAt: time.Unix(100, 0).UTC()}
	guests := []*corpusv1.Guest{{Id: "a", Name: "web", DesiredState: "running"}, {Id: "b", Name: "db"}}
	e := Entry{GuestID: "a", GuestName: "web", Driver: "lxc", Op: "create", Started: time.Unix(5, 0).UTC()}
	if err := c.SetIdentity(id); err != nil {
		t.Fatal(err)
	}
	routes := []*corpusv1.Route{{Id: "r", Kind: string(corpusv1.RouteHTTP), Domain: "web.example.test", GuestId: "a", GuestPort: 80}}
	if err := c.SetDesired(&corpusv1.WatchResponse{Index: 7, Guests: guests, Routes: routes}); err != nil {
		t.Fatal(err)
	}
	if err := c.Begin(e); err != nil {
		t.Fatal(err)
	}

	// Only one process may hold the database.
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "another agent") {
		t.Fatalf("second Open = %v, want an 'another agent' error", err)
	}
	c.Close()

	c, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := c.Identity(); err != nil || !reflect.DeepEqual(got, id) {
		t.Errorf("Identity() = %+v, %v; want %+v", got, err, id)
	}
	got, ok, err := c.Desired()
	want := &corpusv1.WatchResponse{Index: 7, Guests: guests, Routes: routes}
	if err != nil || !ok || !proto.Equal(got, want) {
		t.Fatalf("Desired() = %v, %v, %v; want %v", got, ok, err, want)
	}
	j, err := c.Journal()
	if err != nil || len(j) != 1 || j[0] != e {
		t.Fatalf("Journal() = %+v, %v; want [%+v]", j, err, e)
	}
	if err := c.End(e); err != nil {
		t.Fatal(err)
	}
	if j, _ := c.Journal(); len(j) != 0 {
		t.Errorf("Journal() after End = %+v, want empty", j)
	}
	// An empty desired set is still "known".
	if err := c.SetDesired(&corpusv1.WatchResponse{Index: 9}); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := c.Desired(); !ok || got.Index != 9 || len(got.Guests) != 0 {
		t.Errorf("Desired() after an empty set = %v, %v; want index 9, no guests", got, ok)
	}
}
