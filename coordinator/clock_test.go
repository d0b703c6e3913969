package coordinator_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator"
	"corpus/coordinator/state"
	"corpus/internal/clock"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestClockSteps steps a replica's time of day, as NTP or an operator
// would: tokens expire by it, certificates it signs while ahead are
// usable at once, heartbeat deadlines do not move with it, and the
// cluster's time does not go back with it.
func TestClockSteps(t *testing.T) {
	var clk clock.Offset
	s := start(t, t.TempDir(), func(c *coordinator.Config) { c.Clock = &clk; c.NodeTimeout = 2 * time.Second })
	ctx := context.Background()
	dev := s.clients(s.userToken("ann", "dev", 2*time.Hour)).guests
	list := func() error {
		_, err := dev.ListGuests(ctx, connect.NewRequest(&corpusv1.ListGuestsRequest{}))
		return err
	}
	// Once a leader's clock stepped three hours ahead, the cluster's time
	// went with it (the refused call was audited): stepping back does not
	// make the expired token good again.
	for _, step := range []struct {
		offset  time.Duration
		expired bool
	}{{time.Hour, false}, {3 * time.Hour, true}, {0, true}} {
		clk.Set(step.offset)
		err := list()
		if got := err != nil && codeOf(err) == connect.CodeUnauthenticated; got != step.expired || (err != nil && !got) {
			t.Fatalf("clock %s ahead: a 2h token's call = %v, want expired %t", step.offset, err, step.expired)
		}
	}

	// A node enrolled while the replica's clock runs 50 minutes ahead
	// holds a certificate this host's TLS accepts at once.
	clk.Set(50 * time.Minute)
	n1 := s.enroll("n1")
	n1.report(t)
	s.waitFor("n1 ready", func(v *state.Snap) bool { return v.Node(n1.id).GetStatus() == state.NodeReady })

	// A day's step does not make a node that reports miss its deadline
	// (2 s here): deadlines run on the monotonic clock.
	clk.Set(24 * time.Hour)
	for range 15 {
		n1.report(t)
		time.Sleep(300 * time.Millisecond)
	}
	if got := s.Store().Read().Node(n1.id).GetStatus(); got != state.NodeReady {
		t.Fatalf("n1 is %s after the clock stepped a day ahead while it reported, want ready", got)
	}

	// Stepped back two days: what is written now is dated no earlier
	// than what was written before.
	before := s.Store().AppliedTime()
	clk.Set(-24 * time.Hour)
	if _, err := s.ops().guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "late", Spec: &corpusv1.GuestSpec{Image: "busybox"}})); err != nil {
		t.Fatal(err)
	}
	g := s.Store().Read().GuestByName("late")
	if g == nil || g.CreatedAt.AsTime().Before(before) {
		t.Fatalf("guest created after the clock stepped back is dated %v, before the cluster's %s", g.GetCreatedAt().AsTime(), before)
	}
}
