package coordinator_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"corpus/coordinator/compat"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestNodeOrphans: the guests a node reports that the cluster does not
// know (after a restore) are kept on the node's record, replaced by each
// report, once every coordinator can store them: on the previous release's
// cluster version a report with orphans is acknowledged and they are not
// kept. Not parallel: it changes compat.Current.
func TestNodeOrphans(t *testing.T) {
	release := compat.Current
	t.Cleanup(func() { compat.Current = release })
	if compat.Since(compat.NodeOrphans) != release {
		t.Fatalf("node orphans came in %s, this release is %s: the test plays the release before it", compat.Since(compat.NodeOrphans), release)
	}
	dir := t.TempDir()
	orphans := []*corpusv1.OrphanGuest{{GuestId: "g-late", Name: "late"}, {GuestId: "g-later", Name: "later"}}
	report := func(s *server, a *agent, orphans []*corpusv1.OrphanGuest) {
		t.Helper()
		c := s.clientsAs(a.cert, "")
		if _, err := c.agent.Report(context.Background(), connect.NewRequest(&corpusv1.ReportRequest{
			Capacity: capacity(), Drivers: drivers(), AgentAddress: a.address, AgentVersion: "test", Orphans: orphans,
		})); err != nil {
			t.Fatalf("Report(%s with %d orphans) = %v", a.name, len(orphans), err)
		}
	}
	kept := func(s *server) []*corpusv1.OrphanGuest {
		t.Helper()
		n, err := s.ops().nodes.GetNode(context.Background(), connect.NewRequest(&corpusv1.GetNodeRequest{Name: "n1"}))
		if err != nil {
			t.Fatal(err)
		}
		return n.Msg.Node.Node.Orphans
	}

	compat.Current = compat.Version{Major: release.Major, Minor: release.Minor - 1}
	s := start(t, dir)
	a := s.enroll("n1")
	report(s, a, orphans)
	if got := kept(s); len(got) != 0 {
		t.Errorf("a group at %s kept orphans %v, which its replicas could not all store", compat.Current, got)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}

	compat.Current = release
	s = start(t, dir)
	s.waitFor("cluster version "+release.String(), func(v *state.Snap) bool { return v.ClusterVersion() == release })
	report(s, a, orphans)
	if got := kept(s); len(got) != 2 || got[0].Name != "late" || got[1].GuestId != "g-later" {
		t.Errorf("orphans kept after a report at %s = %v, want late and later", release, got)
	}
	report(s, a, orphans[1:])
	if got := kept(s); len(got) != 1 || got[0].Name != "later" {
		t.Errorf("orphans kept after a report naming one = %v, want later alone", got)
	}
	report(s, a, nil)
	if got := kept(s); len(got) != 0 {
		t.Errorf("orphans kept after a report naming none = %v", got)
	}
}
