package api

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
)

// RelayFromAgent passes a node agent's stream on to the caller. The
// agent's errors keep their code, with the node named (FromAgent); a
// stream that could not be opened or broke is Unavailable. A message
// that says it is the last (done, as deploys and rollbacks end) ends the
// relay with success once passed on: the agent has told the outcome, and
// a caller that leaves on reading it (the CLI does) cancels the call
// before the agent's end of stream arrives, which must not make it a
// failure.
func RelayFromAgent[T any](n *corpusv1.Node, what string, up *connect.ServerStreamForClient[T], err error, send func(*T) error) error {
	if err != nil {
		return FromAgent(n, what, err)
	}
	defer up.Close()
	for up.Receive() {
		if err := send(up.Msg()); err != nil {
			return err
		}
		if last, ok := any(up.Msg()).(interface{ GetDone() bool }); ok && last.GetDone() {
			return nil
		}
	}
	if err := up.Err(); err != nil {
		return FromAgent(n, what, err)
	}
	return nil
}

// FromAgent is the answer for err, the failure of a call (what: "exec",
// "log") to node n's agent: one that did not reach the agent as
// AgentErrors made it (naming the node); the agent's own answer with its
// code and the node named; anything else (a stream that broke)
// Unavailable.
func FromAgent(n *corpusv1.Node, what string, err error) error {
	if _, ok := rpc.Unreachable(err); ok {
		return err
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return connect.NewError(ce.Code(), fmt.Errorf("agent of node %s: %s", n.Name, ce.Message()))
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%s stream from node %s: %w", what, n.Name, err))
}

// AgentErrors is the interceptor of a coordinator's client of node n's
// agent: a call that does not reach the agent at all (refused, no route,
// the dial timed out) fails Unavailable with a message that names the
// node, its agent's address and what to check, so that the caller does
// not take it for its own coordinator's refusal. The agent's answers
// pass unchanged.
func AgentErrors(n *corpusv1.Node) connect.Interceptor {
	return agentErrors{name: n.Name, addr: n.AgentAddress}
}

type agentErrors struct{ name, addr string }

// unreachable keeps the failed dial under the message (rpc.Unreachable
// still finds it).
type unreachable struct {
	msg string
	err error
}

func (u *unreachable) Error() string { return u.msg }
func (u *unreachable) Unwrap() error { return u.err }

func (a agentErrors) named(err error) error {
	cause, ok := rpc.Unreachable(err)
	if !ok {
		return err
	}
	return connect.NewError(connect.CodeUnavailable, &unreachable{err: err,
		msg: fmt.Sprintf("node %s (%s) did not answer: %s; is its agent running? `corpus node list`", a.name, a.addr, cause)})
}

func (a agentErrors) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		return res, a.named(err)
	}
}

func (a agentErrors) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		return agentStream{next(ctx, spec), a}
	}
}

func (agentErrors) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// agentStream names the node in a stream's errors (agentErrors).
type agentStream struct {
	connect.StreamingClientConn
	a agentErrors
}

func (s agentStream) Send(m any) error    { return s.a.named(s.StreamingClientConn.Send(m)) }
func (s agentStream) Receive(m any) error { return s.a.named(s.StreamingClientConn.Receive(m)) }
func (s agentStream) CloseRequest() error { return s.a.named(s.StreamingClientConn.CloseRequest()) }
