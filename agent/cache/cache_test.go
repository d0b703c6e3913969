package cache

import (
	"errors"
	"path/filepath"
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
	if _, _, ok, err := c.Desired(); ok || err != nil {
		t.Fatalf("Desired() on a new cache = ok %v, %v; want nothing stored", ok, err)
	}
	id := Identity{NodeID: "n1", NodeName: "node", NodeSecret: "s", ClusterID: "c", AgentKey: "k", Coordinator: "127.0.0.1:1", EnrolledAt: time.Unix(100, 0).UTC()}
	guests := []*corpusv1.Guest{{Id: "a", Name: "web", DesiredState: "running"}, {Id: "b", Name: "db"}}
	e := Entry{GuestID: "a", GuestName: "web", Driver: "lxc", Op: "create", Started: time.Unix(5, 0).UTC()}
	if err := c.SetIdentity(id); err != nil {
		t.Fatal(err)
	}
	if err := c.SetDesired(7, guests); err != nil {
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
	if got, err := c.Identity(); err != nil || got != id {
		t.Errorf("Identity() = %+v, %v; want %+v", got, err, id)
	}
	idx, got, ok, err := c.Desired()
	if err != nil || !ok || idx != 7 || len(got) != 2 {
		t.Fatalf("Desired() = %d, %d guests, %v, %v; want 7, 2 guests", idx, len(got), ok, err)
	}
	for i, g := range got { // stored by id: a, b
		if !proto.Equal(g, guests[i]) {
			t.Errorf("Desired()[%d] = %v, want %v", i, g, guests[i])
		}
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
	if err := c.SetDesired(9, nil); err != nil {
		t.Fatal(err)
	}
	if idx, got, ok, _ := c.Desired(); !ok || idx != 9 || len(got) != 0 {
		t.Errorf("Desired() after an empty set = %d, %d, %v; want 9, 0, true", idx, len(got), ok)
	}
}
