package coordinator_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	corpusv1 "corpus/proto/corpus/v1"
)

// TestWatchSendsChangesOnly: a node's stream is sent what concerns it,
// and not again when only another node changed; a peer that becomes
// routable is sent to the others.
func TestWatchSendsChangesOnly(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	n1, n2 := s.enroll("n1"), s.enroll("n2")
	n1.report(t)
	n2.report(t)
	w := n1.watch(t)
	first := w.next("the first message", func(*corpusv1.WatchResponse) bool { return true })
	if len(first.Peers) != 0 {
		t.Errorf("peers before any node has an address = %v", first.Peers)
	}

	// n2 changes, but nothing n1 is sent depends on it.
	for _, v := range []string{"v1", "v2", "v3"} {
		if _, err := n2.agent.Report(context.Background(), connect.NewRequest(&corpusv1.ReportRequest{
			Capacity: capacity(), Drivers: drivers(), AgentAddress: n2.address, AgentVersion: v,
		})); err != nil {
			t.Fatalf("Report(n2, version %s) = %v", v, err)
		}
	}
	// Time for n1's stream to have woken for each of them, were it to
	// send: the next message must be the drain below.
	time.Sleep(300 * time.Millisecond)
	if _, err := s.ops().nodes.SetNodeMode(context.Background(), connect.NewRequest(&corpusv1.SetNodeModeRequest{Name: "n1", Mode: "drain"})); err != nil {
		t.Fatalf("SetNodeMode(n1, drain) = %v", err)
	}
	if !w.stream.Receive() {
		t.Fatalf("Watch ended: %v", w.stream.Err())
	}
	if m := w.stream.Msg(); m.Node.Mode != "drain" {
		t.Errorf("the message after n2's changes says mode %q, want drain: n1 was sent a change that was not its own", m.Node.Mode)
	}

	// n2 gets an address: n1 routes its guest subnet to it.
	if _, err := n2.agent.Report(context.Background(), connect.NewRequest(&corpusv1.ReportRequest{
		Capacity: capacity(), Drivers: drivers(), AgentAddress: n2.address, AgentVersion: "v3", Address: "127.0.0.2",
	})); err != nil {
		t.Fatalf("Report(n2 with an address) = %v", err)
	}
	m := w.next("n2 as a peer", func(m *corpusv1.WatchResponse) bool { return len(m.Peers) > 0 })
	if len(m.Peers) != 1 || m.Peers[0].Name != "n2" || m.Peers[0].Address != "127.0.0.2" || m.Peers[0].GuestSubnet == "" {
		t.Errorf("n1's peers = %v, want n2 at 127.0.0.2 with its subnet", m.Peers)
	}
	// n2's own stream does not list itself.
	m2 := n2.watch(t).next("n2's first message", func(*corpusv1.WatchResponse) bool { return true })
	for _, p := range m2.Peers {
		if p.Name == "n2" {
			t.Errorf("n2's peers list n2 itself: %v", m2.Peers)
		}
	}
}
