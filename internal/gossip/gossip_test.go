package gossip_test

import (
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"corpus/internal/gossip"
	"corpus/internal/testrun"
)

// recorder keeps the last change heard about each member.
type recorder struct {
	mu    sync.Mutex
	alive map[string]bool
	seen  chan struct{}
}

func newRecorder() *recorder {
	return &recorder{alive: map[string]bool{}, seen: make(chan struct{}, 1)}
}

func (r *recorder) change(member string, alive bool) {
	r.mu.Lock()
	r.alive[member] = alive
	r.mu.Unlock()
	select {
	case r.seen <- struct{}{}:
	default:
	}
}

// wait blocks until member's last change is alive, or fails the test.
func (r *recorder) wait(t *testing.T, member string, alive bool, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.After(testrun.D(within))
	for {
		r.mu.Lock()
		got, ok := r.alive[member]
		r.mu.Unlock()
		if ok && got == alive {
			return time.Since(start)
		}
		select {
		case <-r.seen:
		case <-deadline:
			t.Fatalf("member %s alive=%v not heard within %s (last: %v, heard: %v)", member, alive, within, got, ok)
		}
	}
}

func start(t *testing.T, name, secret string, r *recorder) *gossip.Member {
	t.Helper()
	cfg := gossip.Config{Name: name, BindAddr: "127.0.0.1:0", ClusterID: "c1", Secret: secret, Logger: slog.New(slog.DiscardHandler)}
	if r != nil {
		cfg.OnChange = r.change
	}
	m, err := gossip.Start(cfg)
	if err != nil {
		t.Fatalf("Start(%s) = %v", name, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestDeadMemberIsNoticed: a member that stops answering (closed without a
// leave, as a crash) is declared gone by the others within seconds.
func TestDeadMemberIsNoticed(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	coord := start(t, gossip.CoordinatorMember("c1"), "secret", r)
	n1 := start(t, gossip.NodeMember("n1", "r1"), "secret", nil)
	n2 := start(t, gossip.NodeMember("n2", "r1"), "secret", nil)
	for _, m := range []*gossip.Member{n1, n2} {
		if err := m.Join(coord.Addr()); err != nil {
			t.Fatalf("Join(%s) = %v", coord.Addr(), err)
		}
	}
	r.wait(t, gossip.NodeMember("n1", "r1"), true, 5*time.Second)
	r.wait(t, gossip.NodeMember("n2", "r1"), true, 5*time.Second)
	// n2 hears of n1 from the others, a gossip round or two later.
	for deadline := time.Now().Add(testrun.D(5 * time.Second)); !slices.Contains(n2.Alive(), gossip.NodeMember("n1", "r1")); {
		if time.Now().After(deadline) {
			t.Fatalf("n2.Alive() = %v after 5s, want n1 there too (gossip spreads membership)", n2.Alive())
		}
		time.Sleep(20 * time.Millisecond)
	}
	n1.Close()
	took := r.wait(t, gossip.NodeMember("n1", "r1"), false, 15*time.Second)
	t.Logf("dead member noticed after %s", took)
	if slices.Contains(coord.Alive(), gossip.NodeMember("n1", "r1")) {
		t.Errorf("coord.Alive() still lists n1 after its leave event")
	}
}

// TestOtherClusterCannotJoin: a member with another cluster secret gets no
// answer it can read.
func TestOtherClusterCannotJoin(t *testing.T) {
	t.Parallel()
	r := newRecorder()
	coord := start(t, gossip.CoordinatorMember("c1"), "secret", r)
	stranger := start(t, gossip.NodeMember("x", "r1"), "other secret", nil)
	if err := stranger.Join(coord.Addr()); err == nil {
		t.Errorf("Join with another cluster's secret = nil, want an error")
	}
	if got := coord.Alive(); slices.Contains(got, gossip.NodeMember("x", "r1")) {
		t.Errorf("coord.Alive() = %v, want no stranger", got)
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{gossip.NodeMember("abc", gossip.NewRun()), "node/abc"} {
		if id, ok := gossip.NodeID(name); !ok || id != "abc" {
			t.Errorf("NodeID(%q) = %q, %v; want abc, true", name, id, ok)
		}
	}
	if a, b := gossip.NewRun(), gossip.NewRun(); a == b || len(a) != 10 {
		t.Errorf("NewRun() = %q, then %q; want two ids of 10 characters", a, b)
	}
	for _, name := range []string{gossip.CoordinatorMember("abc"), "node/", "abc"} {
		if id, ok := gossip.NodeID(name); ok {
			t.Errorf("NodeID(%q) = %q, true; want not a node", name, id)
		}
	}
	if !gossip.IsCoordinator(gossip.CoordinatorMember("c1")) || gossip.IsCoordinator(gossip.NodeMember("c1", "r1")) {
		t.Errorf("IsCoordinator confuses coordinator and node members")
	}
}
