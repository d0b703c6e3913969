package coordinator_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator"
	"corpus/coordinator/state"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestRemoveNode: a node holding a guest cannot be removed; an empty one
// can, and its credential stops working at once, its watch stream ending.
func TestRemoveNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, t.TempDir())
	n1 := s.enroll("n1")
	n1.report(t)
	ops := s.ops()
	if _, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "web", Spec: &corpusv1.GuestSpec{Image: "busybox"}})); err != nil {
		t.Fatal(err)
	}
	s.waitFor("web placed", func(v *state.Snap) bool { return v.GuestByName("web").GetNodeId() == n1.id })
	if _, err := ops.nodes.RemoveNode(ctx, connect.NewRequest(&corpusv1.RemoveNodeRequest{Name: "n1"})); codeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("removing a node with a guest = %v, want FailedPrecondition", err)
	}
	if s.Store().Read().Node(n1.id) == nil {
		t.Fatalf("a refused removal removed the node")
	}
	// Delete the guest (the agent confirms), then remove the node while
	// its agent watches.
	if _, err := ops.guests.DeleteGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "web"})); err != nil {
		t.Fatal(err)
	}
	g := s.Store().Read().GuestByName("web")
	n1.report(t, observed(g.Id, state.ObservedDeleted))
	s.waitFor("web gone", func(v *state.Snap) bool { return v.GuestByName("web") == nil })
	ended := watchUntilEnd(t, n1.clients)
	if _, err := ops.nodes.RemoveNode(ctx, connect.NewRequest(&corpusv1.RemoveNodeRequest{Name: "n1"})); err != nil {
		t.Fatalf("RemoveNode(empty n1) = %v", err)
	}
	select {
	case err := <-ended:
		if codeOf(err) != connect.CodeNotFound {
			t.Errorf("the removed node's watch ended with %v, want NotFound", err)
		}
	case <-time.After(testrun.D(5 * time.Second)):
		t.Fatalf("the removed node's watch stream did not end")
	}
	if _, err := n1.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: capacity(), Drivers: drivers()})); codeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("the removed node's credential = %v, want Unauthenticated", err)
	}
	audit, err := ops.audit.ListAudit(ctx, connect.NewRequest(&corpusv1.ListAuditRequest{Action: "remove_node"}))
	if err != nil || len(audit.Msg.Entries) != 2 || audit.Msg.Entries[0].Result == "ok" || audit.Msg.Entries[1].Result != "ok" {
		t.Errorf("audit of the removals = %v, %v", audit, err)
	}
}

// TestRenewedCertificates: a node renews its certificate while its watch
// stream stays open on the first; the first keeps working after one
// renewal (connections opened before it finish), and after a second the
// stream opened with it ends and it is refused.
func TestRenewedCertificates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t, t.TempDir())
	n1 := s.enroll("n1")
	first := n1.clients
	ended := watchUntilEnd(t, first)
	n1.renew(t)
	if _, err := first.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: capacity(), Drivers: drivers()})); err != nil {
		t.Errorf("Report with the certificate just replaced = %v, want it still accepted", err)
	}
	select {
	case err := <-ended:
		t.Fatalf("the watch stream ended after one renewal: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	n1.renew(t)
	select {
	case err := <-ended:
		if codeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("the old certificate's watch ended with %v, want Unauthenticated", err)
		}
	case <-time.After(testrun.D(5 * time.Second)):
		t.Fatalf("the watch stream of a certificate out of use did not end")
	}
	if _, err := first.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: capacity(), Drivers: drivers()})); codeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("Report with a certificate two renewals old = %v, want Unauthenticated", err)
	}
	if _, err := n1.agent.Report(ctx, connect.NewRequest(&corpusv1.ReportRequest{Capacity: capacity(), Drivers: drivers()})); err != nil {
		t.Errorf("Report with the current certificate = %v", err)
	}
}

// watchUntilEnd opens a watch stream as c and returns a channel that gets
// the stream's error when it ends (it is cancelled when the test ends).
func watchUntilEnd(t *testing.T, c clients) <-chan error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(20*time.Second))
	t.Cleanup(cancel)
	stream, err := c.agent.Watch(ctx, connect.NewRequest(&corpusv1.WatchRequest{}))
	if err != nil || !stream.Receive() {
		t.Fatalf("Watch = %v, %v", err, stream.Err())
	}
	ended := make(chan error, 1)
	go func() {
		for stream.Receive() {
		}
		ended <- stream.Err()
	}()
	return ended
}

// TestIncompleteCARefused: a replica whose CA key went missing refuses to
// start instead of making a new CA, which would orphan every certificate.
func TestIncompleteCARefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := start(t, dir)
	caCert := s.CACert()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, coordinator.TLSDir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	cfg := coordinator.Default()
	cfg.DataDir, cfg.APIAddr, cfg.RaftAddr, cfg.DNS.Addr, cfg.GossipAddr = dir, "127.0.0.1:0", "127.0.0.1:0", "", ""
	if _, err := coordinator.New(cfg); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Fatalf("New with the CA key missing = %v, want it refused as incomplete", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, coordinator.TLSDir, coordinator.CACertFile)); err != nil || string(b) != string(caCert) {
		t.Errorf("the CA certificate changed after a refused start (%v)", err)
	}
}
