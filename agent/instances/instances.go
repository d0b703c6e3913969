// Package instances keeps the project instances of a node serving what
// the cluster says (deploy.Pipeline.SyncInstance): on every pass of the
// agent it starts a sync of each instance guest of its node whose
// release, staged release, standby, process counts or init process
// changed since its last good sync, one at a time per guest, and says
// what each serves and stages for the guest's observed state
// (GuestObserved.release, staged_release, release_error). A sync that
// failed is tried again after Retry; one that left processes to stop
// later (deploy.Outcome.TidyAt: a web the routes just left) runs again
// then. The first instance of an
// environment is here only while a release stands by (a blue-green
// deploy): it follows a switch back and retires the standby once it
// expires.
package instances

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"corpus/agent/deploy"
	"corpus/internal/clock"
	corpusv1 "corpus/proto/corpus/v1"
)

// Retry is how long a failed sync waits before it is tried again.
const Retry = 10 * time.Second

// Guest is an instance's guest as the agent last saw it.
type Guest struct {
	Name string
	// Running: desired running and observed running, with init process
	// PID.
	Running bool
	PID     int64
	// Waiting: not started yet, for the services its project links.
	Waiting bool
}

// SyncFunc makes an instance serve its release (deploy.Pipeline.SyncInstance).
type SyncFunc func(ctx context.Context, in deploy.Instance, serving func(uint32)) (deploy.Outcome, error)

// Syncer keeps the instances of a node in sync; its zero value is not
// usable, New makes one.
type Syncer struct {
	sync   SyncFunc
	kick   func() // asks the agent for another pass
	report func() // asks the agent for a status report soon
	logger *slog.Logger

	mu    sync.Mutex
	state map[string]*state // by guest id
}

// state is the last sync of an instance guest.
type state struct {
	key     string // what it was made for: release, scale, init PID …
	busy    bool
	out     deploy.Outcome
	err     string
	at      time.Time
	expires time.Time // the standby's end a kick is set for
	// again: a pass wanted another sync while this one ran (the release
	// or the scale changed meanwhile); its end asks for a pass.
	again bool
	// tidyAt: the last sync left processes to stop then (a sync
	// that runs after it stops them).
	tidyAt time.Time
}

// New returns a Syncer that syncs through sync and calls kick for
// another pass and report when what it says changed.
func New(sync SyncFunc, kick, report func(), logger *slog.Logger) *Syncer {
	return &Syncer{sync: sync, kick: kick, report: report, logger: logger, state: map[string]*state{}}
}

// Reconcile starts the syncs the instances assigned to this node need;
// guests are their guests by id. It returns at once.
func (s *Syncer) Reconcile(ctx context.Context, assigned []*corpusv1.InstanceAssignment, guests map[string]Guest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for _, as := range assigned {
		g, ok := guests[as.GuestId]
		seen[as.GuestId] = true
		if !ok || !g.Running || g.Waiting {
			continue
		}
		until := as.GetStandbyUntil().AsTime()
		expired := as.StandbyRelease != 0 && !clock.System.Now().Before(until)
		staged := as.StagedRelease
		if staged == as.Release {
			// A rolling deploy switched the instance to the release it
			// staged: nothing stands staged beside it (the mark goes
			// next, a write that needs no sync).
			staged = 0
		}
		key := fmt.Sprintf("%d %v %d %d/%d %v", as.Release, as.Scale, g.PID, staged, as.StandbyRelease, expired)
		st := s.state[as.GuestId]
		if st == nil {
			st = &state{}
			s.state[as.GuestId] = st
		}
		if as.StandbyRelease != 0 && !expired && !st.expires.Equal(until) {
			st.expires = until
			time.AfterFunc(time.Until(until)+100*time.Millisecond, s.kick)
		}
		if st.busy {
			st.again = st.again || st.key != key
			continue
		}
		if st.key == key && (st.err == "" || time.Since(st.at) < Retry) {
			continue
		}
		st.busy, st.key = true, key
		in := deploy.Instance{GuestID: as.GuestId, Guest: g.Name, Project: as.Project, Env: as.Env, Index: as.Index, Release: as.Release, Scale: as.Scale,
			Staged: staged, Standby: as.StandbyRelease, StandbyUntil: until}
		if st.err == "" && st.out.Staged == as.Release && st.out.Serving != as.Release {
			in.From = st.out.Serving // a switch to what it staged
		}
		go s.run(ctx, in, st)
	}
	for id := range s.state {
		if !seen[id] {
			delete(s.state, id)
		}
	}
}

func (s *Syncer) run(ctx context.Context, in deploy.Instance, st *state) {
	start := time.Now()
	out, err := s.sync(ctx, in, func(rel uint32) {
		s.mu.Lock()
		changed := st.out.Serving != rel || st.err != ""
		st.out.Serving, st.err = rel, ""
		s.mu.Unlock()
		if changed {
			s.report()
		}
	})
	s.mu.Lock()
	st.busy, st.at = false, time.Now()
	if st.again {
		// What the pass saw while this ran is not done yet: without a
		// kick it waits for the next change or resync (seconds; a
		// rolling deploy's instance waited 9 s behind a scale change).
		st.again = false
		defer s.kick()
	}
	prev := *st
	if errors.Is(err, deploy.ErrBusy) {
		st.key = "" // try again on the next pass
		s.mu.Unlock()
		time.AfterFunc(time.Second, s.kick)
		return
	}
	// Processes left to stop at TidyAt: a sync then stops them, unless
	// one that ends after it did.
	st.tidyAt, out.TidyAt = out.TidyAt, time.Time{}
	if at := st.tidyAt; !at.IsZero() {
		time.AfterFunc(time.Until(at)+10*time.Millisecond, func() {
			s.mu.Lock()
			due := st.tidyAt.Equal(at) && !st.busy
			if due {
				st.key = ""
			}
			s.mu.Unlock()
			if due {
				s.kick()
			}
		})
	}
	st.out, st.err = out, ""
	if err != nil {
		st.err = err.Error()
		s.logger.Warn("project instance does not serve its release; will retry", "guest", in.Guest, "release", corpusv1.ReleaseName(in.Release), "error", err)
		time.AfterFunc(Retry, s.kick)
	}
	changed := prev.out != st.out || prev.err != st.err
	s.mu.Unlock()
	if err == nil {
		s.logger.Info("project instance synced", "guest", in.Guest, "release", corpusv1.ReleaseName(in.Release),
			"serving", corpusv1.ReleaseName(out.Serving), "staged", corpusv1.ReleaseName(out.Staged), "took", time.Since(start).Round(time.Millisecond))
	}
	if changed {
		s.report()
	}
}

// Observed adds what an instance guest serves and stages to o, its
// observed state (the caller's copy). The first instance's is the
// pipeline's to say (the release records).
func (s *Syncer) Observed(id string, o *corpusv1.GuestObserved) *corpusv1.GuestObserved {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.state[id]; st != nil {
		o.Release, o.ReleaseError = st.out.Serving, st.err
		o.StagedRelease, o.StagedPort = st.out.Staged, st.out.StagedPort
	}
	return o
}
