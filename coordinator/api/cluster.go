package api

import (
	"context"
	"errors"

	"corpus/coordinator/compat"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// Group is what the cluster services need from the replica's Raft group.
type Group interface {
	// Self describes this replica.
	Self() *corpusv1.PeerResponse
	// Leader is the leader's id and whether this replica is it.
	Leader() (id string, self bool)
	// Peers is the Raft configuration.
	Peers() ([]*corpusv1.RaftPeer, error)
	// AddPeer and RemovePeer change the group; on a follower they are
	// passed to the leader.
	AddPeer(ctx context.Context, id, raftAddr, apiAddr string) error
	RemovePeer(ctx context.Context, id string) error
	// Seen records heartbeats a follower passed on.
	Seen(nodeIDs []string)
	// ReadIndex makes this replica's state at least as new as every
	// write acknowledged before the call, for a linearizable read, and
	// returns the index it waited for.
	ReadIndex(ctx context.Context) (uint64, error)
}

// Business errors travel between replicas by name.
var errorKinds = map[string]error{
	"not_found":      state.ErrNotFound,
	"exists":         state.ErrExists,
	"invalid_token":  state.ErrInvalidToken,
	"stale":          state.ErrStale,
	"invalid":        state.ErrInvalid,
	"bad_transition": state.ErrBadTransition,
	"port_taken":     state.ErrPortTaken,
	"exhausted":      state.ErrExhausted,
	"needs_upgrade":  compat.ErrNeedsUpgrade,
}

// ErrorKind names a business error for ApplyResponse ("" when it has no
// name: it then travels as a message only).
func ErrorKind(err error) string {
	for k, e := range errorKinds {
		if errors.Is(err, e) {
			return k
		}
	}
	return ""
}

// ErrorFromKind turns an ApplyResponse's error back into an error that
// matches the state's sentinel, so handlers on followers decide as the
// leader's would.
func ErrorFromKind(kind, msg string) error {
	if e, ok := errorKinds[kind]; ok {
		return &remoteError{msg: msg, kind: e}
	}
	return errors.New(msg)
}

type remoteError struct {
	msg  string
	kind error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }
