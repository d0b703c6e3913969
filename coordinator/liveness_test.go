package coordinator

import (
	"testing"
	"time"

	"corpus/internal/gossip"
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
		{"gossip sees it alive again", func(l *liveness) { l.gossip(gossip.NodeMember("n1"), true) }, 16 * time.Second, ""},
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

func TestLivenessGossipEvents(t *testing.T) {
	t.Parallel()
	l := newLiveness(time.Minute)
	l.gossip(gossip.CoordinatorMember("c2"), false)
	if len(l.gone) != 0 {
		t.Errorf("a coordinator member's death was taken for a node's: %v", l.gone)
	}
	l.gossip(gossip.NodeMember("n1"), false)
	select {
	case <-l.wake:
	default:
		t.Errorf("a node's death did not wake the checker")
	}
	if _, ok := l.gone["n1"]; !ok {
		t.Errorf("gone = %v, want n1", l.gone)
	}
}
