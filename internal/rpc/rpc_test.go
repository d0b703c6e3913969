package rpc

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
)

func TestRetryWithoutLeader(t *testing.T) {
	noLeader := connect.NewError(connect.CodeUnavailable, errors.New("this coordinator is not the raft leader (no leader is elected yet)"))
	other := connect.NewError(connect.CodeUnavailable, errors.New("connection refused"))
	for _, tc := range []struct {
		name  string
		errs  []error
		calls int
		ok    bool
	}{
		{"election then success", []error{noLeader, noLeader, nil}, 3, true},
		{"other unavailability is not retried", []error{other, nil}, 1, false},
		{"business errors are not retried", []error{connect.NewError(connect.CodeAlreadyExists, errors.New("x")), nil}, 1, false},
	} {
		calls := 0
		next := func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			err := tc.errs[calls]
			calls++
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(&struct{}{}), nil
		}
		_, err := RetryWithoutLeader(5*time.Second)(next)(context.Background(), connect.NewRequest(&struct{}{}))
		if calls != tc.calls || (err == nil) != tc.ok {
			t.Errorf("%s: %d calls, err %v; want %d calls, ok %v", tc.name, calls, err, tc.calls, tc.ok)
		}
	}
	// It gives up at its deadline.
	start := time.Now()
	always := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return nil, noLeader }
	if _, err := RetryWithoutLeader(300*time.Millisecond)(always)(context.Background(), connect.NewRequest(&struct{}{})); err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("retrying forever: %v after %s", err, time.Since(start))
	}
}
