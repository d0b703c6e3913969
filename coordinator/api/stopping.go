package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
)

// stopping is the interceptor that answers Unavailable (RetryStopping)
// for a call that ended because its replica is stopping (its context
// cancelled with rpc.ErrStopping): a blocking read, a Watch stream, a
// write waiting for its entry. Cancelled, as connect would say, tells a
// client that it gave up itself, so it would not try another replica.
// A write cut off that way may have taken effect: the answer says so.
type stopping struct{}

// stopped is err as a stopping replica answers it. A stream that ends
// without an error when its replica stops (a Watch: its handler cannot
// tell the client leaving from the replica stopping) ends the same way.
func stopped(ctx context.Context, err error, stream bool) error {
	if (err == nil && !stream) || !errors.Is(context.Cause(ctx), rpc.ErrStopping) {
		return err
	}
	if err == nil {
		return rpc.Unavailable(rpc.ErrStopping, corpusv1.RetryStopping)
	}
	switch connect.CodeOf(err) {
	case connect.CodeCanceled, connect.CodeDeadlineExceeded, connect.CodeUnknown:
		return rpc.Unavailable(errors.Join(rpc.ErrStopping, rpc.ErrMaybeDone), corpusv1.RetryStopping)
	}
	return err
}

func (stopping) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		return res, stopped(ctx, err, false)
	}
}

func (stopping) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (stopping) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return stopped(ctx, next(ctx, conn), true)
	}
}
