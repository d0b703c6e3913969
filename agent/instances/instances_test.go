package instances

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"corpus/agent/deploy"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestChangeDuringSync: a pass that finds an instance's sync still
// running for an older release does not start another, and the sync's end
// asks for a pass (kick), which starts the sync of the new release. A
// pass with nothing new while it ran asks for none.
func TestChangeDuringSync(t *testing.T) {
	var (
		mu      sync.Mutex
		synced  []uint32
		release = make(chan struct{})
		kicks   = make(chan struct{}, 10)
	)
	syncFn := func(ctx context.Context, in deploy.Instance, serving func(uint32)) (deploy.Outcome, error) {
		mu.Lock()
		synced = append(synced, in.Release)
		mu.Unlock()
		<-release
		return deploy.Outcome{Serving: in.Release}, nil
	}
	s := New(syncFn, func() { kicks <- struct{}{} }, func() {}, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	guests := map[string]Guest{"g2": {Name: "site-dev-2", Running: true, PID: 7}}
	assign := func(rel uint32) []*corpusv1.InstanceAssignment {
		return []*corpusv1.InstanceAssignment{{GuestId: "g2", Project: "site", Env: "dev", Index: 2, Release: rel}}
	}
	done := func(n int) {
		t.Helper()
		testrun.Until(t, 10*time.Second, "the sync done", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			mu.Lock()
			defer mu.Unlock()
			return len(synced) == n && !s.state["g2"].busy
		})
	}

	s.Reconcile(ctx, assign(1), guests)
	testrun.Until(t, 10*time.Second, "the sync of r1 started", func() bool { mu.Lock(); defer mu.Unlock(); return len(synced) == 1 })
	s.Reconcile(ctx, assign(1), guests) // nothing new
	s.Reconcile(ctx, assign(2), guests) // r2 while r1 syncs
	release <- struct{}{}
	done(1)
	select {
	case <-kicks:
	case <-time.After(testrun.D(10 * time.Second)):
		t.Fatal("the sync of r1 ended without asking for the pass r2 needs")
	}
	s.Reconcile(ctx, assign(2), guests) // the pass the kick asked for
	testrun.Until(t, 10*time.Second, "the sync of r2 started", func() bool { mu.Lock(); defer mu.Unlock(); return len(synced) == 2 })
	release <- struct{}{}
	done(2)
	if got := synced; got[0] != 1 || got[1] != 2 {
		t.Errorf("synced %v, want r1 then r2", got)
	}
	select {
	case <-kicks:
		t.Error("a sync with nothing new asked for during it asked for a pass")
	default:
	}
}

// TestTidyAt: a sync that leaves processes to stop later (Outcome.TidyAt)
// gets a pass then, and the pass syncs the instance again although
// nothing it was assigned changed; that sync, with nothing left to
// wait for, asks for none.
func TestTidyAt(t *testing.T) {
	var (
		mu    sync.Mutex
		calls int
		kicks = make(chan time.Time, 10)
	)
	syncFn := func(ctx context.Context, in deploy.Instance, serving func(uint32)) (deploy.Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		out := deploy.Outcome{Serving: in.Release}
		if calls == 1 {
			out.TidyAt = time.Now().Add(50 * time.Millisecond)
		}
		return out, nil
	}
	s := New(syncFn, func() { kicks <- time.Now() }, func() {}, slog.New(slog.DiscardHandler))
	guests := map[string]Guest{"g2": {Name: "site-dev-2", Running: true, PID: 7}}
	assign := []*corpusv1.InstanceAssignment{{GuestId: "g2", Project: "site", Env: "dev", Index: 2, Release: 3}}
	start := time.Now()
	s.Reconcile(context.Background(), assign, guests)
	idle := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.state["g2"].busy
	}
	testrun.Until(t, 10*time.Second, "the first sync done", func() bool { mu.Lock(); defer mu.Unlock(); return calls == 1 && idle() })
	s.Reconcile(context.Background(), assign, guests) // nothing new: no sync
	select {
	case at := <-kicks:
		if at.Sub(start) < 50*time.Millisecond {
			t.Errorf("the pass came %s after the sync began, before its TidyAt", at.Sub(start))
		}
	case <-time.After(testrun.D(10 * time.Second)):
		t.Fatal("no pass asked for at TidyAt")
	}
	s.Reconcile(context.Background(), assign, guests)
	testrun.Until(t, 10*time.Second, "the second sync done", func() bool { mu.Lock(); defer mu.Unlock(); return calls == 2 && idle() })
	s.Reconcile(context.Background(), assign, guests)
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 {
		t.Errorf("%d syncs, want 2 (the first, the one at TidyAt)", calls)
	}
	select {
	case <-kicks:
		t.Error("a sync with nothing to wait for asked for a pass")
	default:
	}
}

// TestFrom: the sync of a release the instance's last sync staged is
// told what it served then (Instance.From: the switch it expects); a
// sync of any other release, or after a sync that failed, is not.
func TestFrom(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []deploy.Instance
		fail bool
	)
	syncFn := func(ctx context.Context, in deploy.Instance, serving func(uint32)) (deploy.Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, in)
		if fail {
			return deploy.Outcome{}, errors.New("it broke")
		}
		return deploy.Outcome{Serving: in.Release, Staged: in.Staged}, nil
	}
	s := New(syncFn, func() {}, func() {}, slog.New(slog.DiscardHandler))
	guests := map[string]Guest{"g2": {Name: "site-dev-2", Running: true, PID: 7}}
	step := func(rel, staged uint32, want deploy.Instance) {
		t.Helper()
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		s.Reconcile(context.Background(), []*corpusv1.InstanceAssignment{{GuestId: "g2", Project: "site", Env: "dev", Index: 2, Release: rel, StagedRelease: staged}}, guests)
		testrun.Until(t, 10*time.Second, "the sync done", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			mu.Lock()
			defer mu.Unlock()
			return len(seen) == n+1 && !s.state["g2"].busy
		})
		mu.Lock()
		defer mu.Unlock()
		if got := seen[n]; got.Release != want.Release || got.Staged != want.Staged || got.From != want.From {
			t.Errorf("release %d, staged %d: synced %+v, want %+v", rel, staged, got, want)
		}
	}
	step(3, 0, deploy.Instance{Release: 3})
	step(3, 4, deploy.Instance{Release: 3, Staged: 4})
	step(4, 4, deploy.Instance{Release: 4, From: 3}) // the roll's switch
	step(4, 5, deploy.Instance{Release: 4, Staged: 5})
	step(6, 0, deploy.Instance{Release: 6}) // not what it staged
	step(6, 7, deploy.Instance{Release: 6, Staged: 7})
	mu.Lock()
	fail = true
	mu.Unlock()
	step(6, 8, deploy.Instance{Release: 6, Staged: 8})
	mu.Lock()
	fail = false
	mu.Unlock()
	step(8, 8, deploy.Instance{Release: 8}) // the last sync failed
}
