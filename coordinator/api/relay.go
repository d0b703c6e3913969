package api

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	corpusv1 "corpus/proto/corpus/v1"
)

// RelayFromAgent passes a node agent's stream on to the caller. The
// agent's errors keep their code, with the node named; a stream that
// could not be opened or broke is Unavailable. A message that says it
// is the last (done, as deploys and rollbacks end) ends the relay with
// success once passed on: the agent has told the outcome, and a caller
// that leaves on reading it (the CLI does) cancels the call before the
// agent's end of stream arrives, which must not make it a failure.
func RelayFromAgent[T any](n *corpusv1.Node, what string, up *connect.ServerStreamForClient[T], err error, send func(*T) error) error {
	if err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("reaching agent of node %s: %w", n.Name, err))
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
		var ce *connect.Error
		if errors.As(err, &ce) {
			return connect.NewError(ce.Code(), fmt.Errorf("agent of node %s: %s", n.Name, ce.Message()))
		}
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%s stream from node %s: %w", what, n.Name, err))
	}
	return nil
}
