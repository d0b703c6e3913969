package api

import (
	"context"
	"strings"

	"connectrpc.com/connect"

	"corpus/internal/rpc"
)

// ConsistencyHeader asks for a linearizable read: with the value
// "linearizable", the replica that takes the call first makes its state
// at least as new as every write acknowledged before the call began
// (Group.ReadIndex: a round trip to the leader and a Raft barrier), so
// the answer can be no older than any write the caller saw succeed,
// whichever replica took that write. Without it a replica answers from
// the state it has applied, which on a follower, or on a leader cut off
// from the others that does not know it yet, may lag behind.
const ConsistencyHeader = rpc.ConsistencyHeader

// consistentReads is the interceptor that honours ConsistencyHeader on
// unary calls; it runs after authentication, so only callers allowed the
// procedure make replicas commit barriers.
type consistentReads struct {
	unaryOnly
	group Group
}

func (c consistentReads) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if v := req.Header().Get(ConsistencyHeader); v != "" && c.group != nil {
			if !strings.EqualFold(v, "linearizable") {
				return nil, ToConnect(Invalidf("header %s: %q is not a consistency this API serves (linearizable, or no header for the replica's own state)", ConsistencyHeader, v))
			}
			if _, err := c.group.ReadIndex(ctx); err != nil {
				return nil, ToConnect(err)
			}
		}
		return next(ctx, req)
	}
}

// currentNotFound is the interceptor that runs a call that changes
// something once more when it answered NotFound, after this replica
// caught up with the leader (Group.ReadIndex): handlers look up what a
// call names in the replica's own state before they write, and a
// follower that has not yet applied a create another client saw
// acknowledged would otherwise answer that it does not exist. corpus
// writes are idempotent, so a second run is safe; a NotFound the state
// machine decided comes back the same, or the create has happened since.
// A replica that cannot catch up (no leader, cut off) answers that,
// not NotFound.
type currentNotFound struct {
	unaryOnly
	group Group
}

func (c currentNotFound) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		if err == nil || c.group == nil || connect.CodeOf(err) != connect.CodeNotFound ||
			req.Spec().IdempotencyLevel == connect.IdempotencyNoSideEffects {
			return res, err
		}
		if _, err := c.group.ReadIndex(ctx); err != nil {
			// Not known to be missing: this replica cannot tell now.
			return nil, ToConnect(err)
		}
		return next(ctx, req)
	}
}

// unaryOnly gives an interceptor of unary calls the streaming half of
// connect.Interceptor: streams pass through.
type unaryOnly struct{}

func (unaryOnly) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (unaryOnly) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
