package coordinator

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"testing"
	"time"

	"corpus/coordinator/state"
	"corpus/internal/gossip"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestLivenessVerdict: the heartbeat deadline, the gossip shortcut, and
// the grace period a new leader gives every node.
func TestLivenessVerdict(t *testing.T) {
	t.Parallel()
	const timeout = 10 * time.Second
	t0 := time.Now()
	steps := []struct {
		name string
		do   func(l *liveness)
		at   time.Duration // when the verdict is asked, after t0
		want string
	}{
		{"first sight starts the grace period", nil, 0, ""},
		{"within the deadline", nil, 9 * time.Second, ""},
		{"past the deadline", nil, 10 * time.Second, "missed its heartbeat deadline"},
		{"a heartbeat renews it", func(l *liveness) { l.last["n1"] = t0.Add(11 * time.Second) }, 12 * time.Second, ""},
		{"gossip finds it dead: at once", func(l *liveness) { l.gone["n1"] = t0.Add(13 * time.Second) }, 13 * time.Second, "found dead by gossip"},
		{"a heartbeat after the death wins", func(l *liveness) { l.last["n1"] = t0.Add(14 * time.Second) }, 15 * time.Second, ""},
		{"gossip sees it alive again", func(l *liveness) { l.gossip(gossip.NodeMember("n1", "r1"), true) }, 16 * time.Second, ""},
		{"dead again", func(l *liveness) { l.gone["n1"] = t0.Add(17 * time.Second) }, 17 * time.Second, "found dead by gossip"},
		{"a new leader: grace for everyone", func(l *liveness) { l.reset() }, 18 * time.Second, ""},
		{"a death heard before the failover waits for the deadline", nil, 27 * time.Second, ""},
		{"... which still applies", nil, 28 * time.Second, "missed its heartbeat deadline"},
	}
	l := newLiveness(timeout)
	for _, s := range steps {
		if s.do != nil {
			s.do(l)
		}
		if got := l.verdict("n1", t0.Add(s.at)); got != s.want {
			t.Errorf("%s: verdict(n1, t0+%s) = %q, want %q", s.name, s.at, got, s.want)
		}
	}
}

// TestLivenessStalled: a checker that did not look for half the timeout
// (its process paused) gives every node a fresh deadline instead of
// marking them down for heartbeats it could not count.
func TestLivenessStalled(t *testing.T) {
	t.Parallel()
	const timeout = 10 * time.Second
	t0 := time.Now()
	l := newLiveness(timeout)
	l.checked = t0
	l.verdict("n1", t0) // first sight
	for at := 2 * time.Second; at <= 8*time.Second; at += 2 * time.Second {
		if stalled, _ := l.stalled(t0.Add(at)); stalled {
			t.Fatalf("checking every 2s counted as a stall at t0+%s", at)
		}
	}
	// Paused from t0+8s to t0+20s: n1's last heartbeat is 20s old.
	if stalled, gap := l.stalled(t0.Add(20 * time.Second)); !stalled || gap != 12*time.Second {
		t.Fatalf("a 12s gap: stalled %t, %s; want a stall of 12s", stalled, gap)
	}
	if got := l.verdict("n1", t0.Add(20*time.Second)); got != "" {
		t.Errorf("right after the stall: %q, want a fresh deadline", got)
	}
	if got := l.verdict("n1", t0.Add(30*time.Second)); got != "missed its heartbeat deadline" {
		t.Errorf("a timeout after the stall, still silent: %q, want the deadline missed", got)
	}
}

func TestLivenessGossipEvents(t *testing.T) {
	t.Parallel()
	l := newLiveness(time.Minute)
	l.gossip(gossip.CoordinatorMember("c2"), false)
	if len(l.gone) != 0 {
		t.Errorf("a coordinator member's death was taken for a node's: %v", l.gone)
	}
	l.gossip(gossip.NodeMember("n1", "r1"), false)
	select {
	case <-l.wake:
	default:
		t.Errorf("a node's death did not wake the checker")
	}
	if _, ok := l.gone["n1"]; !ok {
		t.Errorf("gone = %v, want n1", l.gone)
	}
}

// TestLivenessRestartedAgent: an agent restarted within the time gossip
// takes to find a member dead joins as a new member before its
// predecessor is found dead; that death is not the node's. The death of
// its last member is.
func TestLivenessRestartedAgent(t *testing.T) {
	t.Parallel()
	l := newLiveness(time.Minute)
	t0 := time.Now()
	old, next := gossip.NodeMember("n1", "r1"), gossip.NodeMember("n1", "r2")
	l.gossip(old, true)
	l.verdict("n1", t0) // first sight
	l.gossip(next, true)
	l.gossip(old, false)
	select {
	case <-l.wake:
		t.Errorf("the predecessor's death woke the checker")
	default:
	}
	if got := l.verdict("n1", t0.Add(time.Second)); got != "" {
		t.Errorf("after the predecessor's death, its successor alive: %q, want the node up", got)
	}
	l.gossip(next, false)
	if got := l.verdict("n1", time.Now()); got != "found dead by gossip" {
		t.Errorf("after the last member's death: %q, want the node down", got)
	}
	// Agents of earlier releases: one member per node, named without a run.
	l.gossip("node/n2", true)
	l.verdict("n2", t0)
	l.gossip("node/n2", false)
	if got := l.verdict("n2", time.Now()); got != "found dead by gossip" {
		t.Errorf("an earlier release's agent found dead: %q, want the node down", got)
	}
}

// TestLivenessChecksGossipDeaths: a node gossip found dead is down only
// when its agent does not accept a connection (here: a real listener on
// loopback, and a port nobody listens on); a node whose agent answers
// keeps its deadline, and that death is forgotten. A missed deadline
// needs no check.
func TestLivenessChecksGossipDeaths(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed := testrun.FreeAddr(t)

	const timeout = time.Minute
	l := newLiveness(timeout)
	t0 := time.Now()
	nodes := []*corpusv1.Node{
		{Id: "up", Name: "up", Status: state.NodeReady, AgentAddress: ln.Addr().String()},
		{Id: "gone", Name: "gone", Status: state.NodeReady, AgentAddress: closed},
		{Id: "silent", Name: "silent", Status: state.NodeReady, AgentAddress: ln.Addr().String()},
		{Id: "downed", Name: "downed", Status: state.NodeDown, AgentAddress: closed},
	}
	for _, n := range nodes {
		l.verdict(n.Id, t0) // first sight
	}
	l.gone["up"], l.gone["gone"], l.gone["downed"] = t0.Add(time.Second), t0.Add(time.Second), t0.Add(time.Second)
	l.last["silent"] = t0.Add(-timeout)

	got := map[string]string{}
	for _, d := range l.downs(context.Background(), nodes, t0.Add(2*time.Second), slog.New(slog.DiscardHandler)) {
		got[d.node.Name] = d.why
	}
	want := map[string]string{"gone": deadByGossip, "silent": "missed its heartbeat deadline"}
	if !maps.Equal(got, want) {
		t.Errorf("downs = %v, want %v", got, want)
	}
	if _, ok := l.gone["up"]; ok {
		t.Error("the death of a node whose agent answers was kept")
	}
	if v := l.verdict("up", t0.Add(3*time.Second)); v != "" {
		t.Errorf("verdict on the node that answered = %q, want its deadline to decide", v)
	}
}

// TestLivenessKeepsADeathHeardDuringItsCheck: the node's agent answered
// the check of one gossip death, but gossip found it dead again while
// the check ran; that later death is not forgotten with the first.
func TestLivenessKeepsADeathHeardDuringItsCheck(t *testing.T) {
	t.Parallel()
	l := newLiveness(time.Minute)
	member := gossip.NodeMember("n1", "r1")
	n := &corpusv1.Node{Id: "n1", Name: "n1", Status: state.NodeReady, AgentAddress: "192.0.2.1:7402"}
	t0 := time.Now()
	l.verdict(n.Id, t0) // first sight
	l.gossip(member, true)
	l.gossip(member, false)
	check := time.Now()
	l.answers = func(context.Context, string, time.Duration) bool {
		// Heard again meanwhile.
		l.gossip(member, true)
		time.Sleep(time.Millisecond)
		l.gossip(member, false)
		return true
	}
	if got := l.downs(context.Background(), []*corpusv1.Node{n}, check, slog.New(slog.DiscardHandler)); len(got) != 0 {
		t.Fatalf("downs = %v, want none: the agent answered", got)
	}
	if v := l.verdict(n.Id, time.Now()); v != deadByGossip {
		t.Errorf("verdict after a death heard during the check = %q, want %q", v, deadByGossip)
	}
}
