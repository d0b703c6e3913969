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
type consistentReads struct{ group Group }

func (c consistentReads) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if v := req.Header().Get(ConsistencyHeader); v != "" && c.group != nil {
			if !strings.EqualFold(v, "linearizable") {
				return nil, toConnect(invalidf("header %s: %q is not a consistency this API serves (linearizable, or no header for the replica's own state)", ConsistencyHeader, v))
			}
			if _, err := c.group.ReadIndex(ctx); err != nil {
				return nil, toConnect(err)
			}
		}
		return next(ctx, req)
	}
}

func (c consistentReads) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c consistentReads) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
