// Package envlock serialises what changes a project environment in its
// guest on a node: the deploy pipeline's users' calls and its background
// work (agent/deploy).
package envlock

import (
	"context"
	"sync"
)

// Locks serialises what changes a project environment in its guest:
// the calls of users (a push, a deploy, a rollback) and background work
// (an instance's sync, the recovery of an interrupted deploy). A user's
// call is refused while another user's call holds the environment; it
// waits for background work, which is short and must not turn a deploy
// away. Background work that finds the environment taken is tried again
// later, or waits for it (Wait).
type Locks struct {
	mu    sync.Mutex
	busy  map[string]*hold
	calls map[string]uint64 // users' calls that took each key so far
}

// hold is what holds an environment.
type hold struct {
	what       string
	background bool
	done       chan struct{} // closed when it lets go
}

// Lock takes key for a user's call what, waiting for background work to
// let go, up to ctx's end; ok false says what holds it.
func (l *Locks) Lock(ctx context.Context, key, what string) (holder string, ok bool) {
	for {
		h := l.take(key, what, false)
		if h == nil {
			return "", true
		}
		if !h.background {
			return h.what, false
		}
		select {
		case <-h.done:
		case <-ctx.Done():
			return h.what, false
		}
	}
}

// TryBackground takes key for background work what, unless it is taken.
func (l *Locks) TryBackground(key, what string) bool {
	return l.take(key, what, true) == nil
}

// take takes key, or returns a copy of what holds it.
func (l *Locks) take(key, what string, background bool) *hold {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy == nil {
		l.busy = map[string]*hold{}
	}
	if h, busy := l.busy[key]; busy {
		c := *h
		return &c
	}
	l.busy[key] = &hold{what: what, background: background, done: make(chan struct{})}
	if !background {
		if l.calls == nil {
			l.calls = map[string]uint64{}
		}
		l.calls[key]++
	}
	return nil
}

// Calls is how many users' calls took key so far: work that let key go
// for a while tells by it whether one came meanwhile.
func (l *Locks) Calls(key string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[key]
}

// Wait takes key for background work what, waiting for whatever holds
// it (a user's call or other background work) to let go, up to ctx's
// end; false says ctx ended first.
func (l *Locks) Wait(ctx context.Context, key, what string) bool {
	for {
		h := l.take(key, what, true)
		if h == nil {
			return true
		}
		select {
		case <-h.done:
		case <-ctx.Done():
			return false
		}
	}
}

// Unlock lets key go.
func (l *Locks) Unlock(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.busy[key]; ok {
		close(h.done)
		delete(l.busy, key)
	}
}
