// Package tokenuse records when, and from which address, users' API
// tokens and SSH keys were last used, without a Raft write per call.
//
// The replica that serves a call notes the use in memory (Use for a
// token, UseKey for a key its node checked at an SSH handshake: a map
// write under a lock, the newest use per credential). Every Interval it
// proposes one TouchUserTokens entry for all the tokens used meanwhile
// (forwarded to the leader from a follower), leaving out a use the state
// already holds to within Interval from the same address: a token used a
// thousand times a second costs at most one entry per Interval on each
// replica that serves it; such a use waits for a later tick, so the
// last use lands within two Intervals. A batch that fails (no leader during an election)
// is kept and tried again on the next tick, so uses outlive a leader
// change; a replica that stops loses at most its last Interval of uses.
// In a group that has not reached the release of TouchUserTokens
// (compat.TokenLastUsed) the uses wait in memory, the newest per token,
// and are written once it has.
package tokenuse

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/compat"
	"corpus/coordinator/state"
	"corpus/internal/clock"
	corpusv1 "corpus/proto/corpus/v1"
)

// DefaultInterval is the grain of the recorded last uses.
const DefaultInterval = time.Minute

// Recorder coalesces token and key uses and persists them. The zero
// value is not usable: fill in the fields, then call Run.
type Recorder struct {
	Store *state.Store
	// Propose commits a command through the leader (forwarded from a
	// follower).
	Propose  func(context.Context, *corpusv1.Command) (uint64, error)
	Interval time.Duration
	Clock    clock.Clock
	Logger   *slog.Logger

	mu      sync.Mutex
	pending map[credential]*corpusv1.TokenUse
}

// credential names a token (by id) or an SSH key (by fingerprint).
type credential struct {
	key bool
	id  string
}

// Use notes that token id authenticated a call from addr ("host:port" or
// a host) now. It never blocks on I/O; a nil Recorder ignores it.
func (r *Recorder) Use(id, addr string) { r.note(credential{id: id}, addr) }

// UseKey notes that the SSH key with that fingerprint opened a session
// from addr now, as Use does for a token.
func (r *Recorder) UseKey(fingerprint, addr string) {
	r.note(credential{key: true, id: fingerprint}, addr)
}

func (r *Recorder) note(c credential, addr string) {
	if r == nil || c.id == "" {
		return
	}
	now := clock.Or(r.Clock).Now()
	from := host(addr)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[credential]*corpusv1.TokenUse{}
	}
	if u, ok := r.pending[c]; ok {
		u.At, u.From = timestamppb.New(now), from
		return
	}
	r.pending[c] = &corpusv1.TokenUse{Id: c.id, At: timestamppb.New(now), From: from}
}

// host is addr without its port.
func host(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// Run flushes the uses every Interval until ctx ends.
func (r *Recorder) Run(ctx context.Context) {
	t := time.NewTicker(r.interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.flush(ctx)
		}
	}
}

func (r *Recorder) interval() time.Duration {
	if r.Interval <= 0 {
		return DefaultInterval
	}
	return r.Interval
}

// flush proposes the pending uses the state does not hold yet, in
// entries of at most state.MaxTokenUses; what fails to commit is kept
// for the next tick.
func (r *Recorder) flush(ctx context.Context) {
	r.mu.Lock()
	taken := r.pending
	r.pending = nil
	r.mu.Unlock()
	if len(taken) == 0 {
		return
	}
	view := r.Store.Read()
	if !compat.Allows(view.ClusterVersion(), compat.TokenLastUsed) {
		// An older replica in the group could not apply it: kept (one
		// per credential) until the group is upgraded.
		r.keep(taken)
		return
	}
	now := clock.Or(r.Clock).Now()
	uses, later := map[credential]*corpusv1.TokenUse{}, map[credential]*corpusv1.TokenUse{}
	for c, u := range taken {
		switch r.judge(view, c, u, now) {
		case stale:
		case soon:
			later[c] = u
		default:
			uses[c] = u
		}
	}
	r.keep(later)
	for len(uses) > 0 {
		batch := &corpusv1.TouchUserTokens{}
		sent := map[credential]*corpusv1.TokenUse{}
		for c, u := range uses {
			if len(sent) == state.MaxTokenUses {
				break
			}
			if c.key {
				batch.KeyUses = append(batch.KeyUses, u)
			} else {
				batch.Uses = append(batch.Uses, u)
			}
			sent[c] = u
			delete(uses, c)
		}
		if _, err := r.Propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_TouchUserTokens{TouchUserTokens: batch}}); err != nil {
			if !errors.Is(err, context.Canceled) {
				r.Logger.Debug("recording token and key uses; kept for the next try", "uses", len(sent)+len(uses), "error", err)
			}
			r.keep(sent)
			r.keep(uses)
			return
		}
	}
}

type verdict int

const (
	// record: the state does not hold the use.
	record verdict = iota
	// stale: the token is gone, or holds this use or a later one.
	stale
	// soon: the token holds a use from the same address recorded less
	// than an interval before now; the use waits for the first tick an
	// interval past that one, so the token is written at most once per
	// interval and its last use still lands.
	soon
)

// judge says what to do, at now, with the use u of credential c given
// the state view. Whether a use waits is measured from now, not from the
// use: a use made just after the last recorded one would otherwise wait
// for ever unless a later use replaced it.
func (r *Recorder) judge(view *state.Snap, c credential, u *corpusv1.TokenUse, now time.Time) verdict {
	last, from, ok := lastUse(view, c)
	switch {
	case !ok || (last != nil && !u.At.AsTime().After(last.AsTime())):
		return stale
	case last != nil && from == u.From && now.Sub(last.AsTime()) < r.interval():
		return soon
	}
	return record
}

// lastUse is the use the state holds for credential c; ok is false when
// the credential is gone.
func lastUse(view *state.Snap, c credential) (at *timestamppb.Timestamp, from string, ok bool) {
	if !c.key {
		t := view.UserToken(c.id)
		return t.GetLastUsedAt(), t.GetLastUsedFrom(), t != nil
	}
	for _, k := range view.UserByFingerprint(c.id).GetKeys() {
		if k.Fingerprint == c.id {
			return k.LastUsedAt, k.LastUsedFrom, true
		}
	}
	return nil, "", false
}

// keep puts back uses that could not be recorded, under newer ones noted
// meanwhile.
func (r *Recorder) keep(uses map[credential]*corpusv1.TokenUse) {
	if len(uses) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[credential]*corpusv1.TokenUse{}
	}
	for c, u := range uses {
		if _, newer := r.pending[c]; !newer {
			r.pending[c] = u
		}
	}
}
