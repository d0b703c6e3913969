package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"corpus/agent/deploy"
	"corpus/drivers"
	"corpus/internal/clock"
	corpusv1 "corpus/proto/corpus/v1"
)

// Project instances (deploy.SyncInstance): on every pass the agent starts
// a sync of each instance guest of its node whose release, staged
// release, standby, process counts or init process changed since its last
// good sync, one at a time per guest, and reports what each serves and
// stages with the guest's observed state (GuestObserved.release,
// staged_release, release_error). A sync that failed is tried again after
// instanceRetry. The first instance of an environment is here only while
// a release stands by (a blue-green deploy): it follows a switch back and
// retires the standby once it expires.

const instanceRetry = 10 * time.Second

// instanceState is the last sync of an instance guest.
type instanceState struct {
	key     string // what it was made for: release, scale, init PID …
	busy    bool
	out     deploy.Outcome
	err     string
	at      time.Time
	expires time.Time // the standby's end a kick is set for
}

func (a *Agent) reconcileInstances(ctx context.Context) {
	if a.deploys == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.known {
		return
	}
	seen := map[string]bool{}
	for _, as := range a.instances {
		g := a.desired[as.GuestId]
		o := a.observed[as.GuestId]
		seen[as.GuestId] = true
		if g == nil || g.DesiredState != corpusv1.DesiredRunning || o == nil || o.State != string(drivers.StateRunning) {
			continue
		}
		if _, waiting := a.guestWaiting[g.Id]; waiting {
			continue
		}
		until := as.GetStandbyUntil().AsTime()
		expired := as.StandbyRelease != 0 && !clock.System.Now().Before(until)
		key := fmt.Sprintf("%d %v %d %d/%d %v", as.Release, as.Scale, o.Pid, as.StagedRelease, as.StandbyRelease, expired)
		st := a.instState[g.Id]
		if st == nil {
			st = &instanceState{}
			a.instState[g.Id] = st
		}
		if as.StandbyRelease != 0 && !expired && !st.expires.Equal(until) {
			st.expires = until
			time.AfterFunc(time.Until(until)+100*time.Millisecond, func() { a.poke(a.kick) })
		}
		if st.busy || (st.key == key && (st.err == "" || time.Since(st.at) < instanceRetry)) {
			continue
		}
		st.busy, st.key = true, key
		in := deploy.Instance{GuestID: g.Id, Guest: g.Name, Project: as.Project, Env: as.Env, Index: as.Index, Release: as.Release, Scale: as.Scale,
			Staged: as.StagedRelease, Standby: as.StandbyRelease, StandbyUntil: until}
		go a.syncInstance(ctx, in, st)
	}
	for id := range a.instState {
		if !seen[id] {
			delete(a.instState, id)
		}
	}
}

func (a *Agent) syncInstance(ctx context.Context, in deploy.Instance, st *instanceState) {
	out, err := a.deploys.SyncInstance(ctx, in, func(rel uint32) {
		a.mu.Lock()
		changed := st.out.Serving != rel || st.err != ""
		st.out.Serving, st.err = rel, ""
		a.mu.Unlock()
		if changed {
			a.poke(a.report)
		}
	})
	a.mu.Lock()
	st.busy, st.at = false, time.Now()
	prev := *st
	if errors.Is(err, deploy.ErrBusy) {
		st.key = "" // try again on the next pass
		a.mu.Unlock()
		time.AfterFunc(time.Second, func() { a.poke(a.kick) })
		return
	}
	st.out, st.err = out, ""
	if err != nil {
		st.err = err.Error()
		a.logger.Warn("project instance does not serve its release; will retry", "guest", in.Guest, "release", corpusv1.ReleaseName(in.Release), "error", err)
		time.AfterFunc(instanceRetry, func() { a.poke(a.kick) })
	}
	changed := prev.out != st.out || prev.err != st.err
	a.mu.Unlock()
	if changed {
		a.poke(a.report)
	}
}

// withInstance adds what an instance guest serves and stages to its
// observed state (a copy); a.mu is held. The first instance's is the
// pipeline's to say (the release records).
func (a *Agent) withInstance(id string, o *corpusv1.GuestObserved) *corpusv1.GuestObserved {
	if st := a.instState[id]; st != nil {
		o.Release, o.ReleaseError = st.out.Serving, st.err
		o.StagedRelease, o.StagedPort = st.out.Staged, st.out.StagedPort
	}
	return o
}
