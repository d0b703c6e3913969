package api

import (
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestRetryDetail: the coordinator's answers for want of a leader or
// for a busy group say so in a Retry detail, and whether the write may
// have taken effect, not only in words.
func TestRetryDetail(t *testing.T) {
	for _, tc := range []struct {
		err       error
		reason    string
		maybeDone bool
	}{
		{fmt.Errorf("%w (no leader is elected yet; retry shortly)", ErrNotLeader), corpusv1.RetryNotLeader, false},
		{fmt.Errorf("%w (leadership was lost while the write was being committed: %w)", ErrNotLeader, rpc.ErrMaybeDone), corpusv1.RetryNotLeader, true},
		{fmt.Errorf("%w: the leader's write queue stayed full", ErrBusy), corpusv1.RetryBusy, false},
		{fmt.Errorf("%w: the write is done (%w)", ErrBusy, rpc.ErrMaybeDone), corpusv1.RetryBusy, true},
	} {
		ce, _ := ToConnect(tc.err).(*connect.Error)
		var got *corpusv1.Retry
		for _, d := range ce.Details() {
			if v, err := d.Value(); err == nil {
				got, _ = v.(*corpusv1.Retry)
			}
		}
		if ce.Code() != connect.CodeUnavailable || got.GetReason() != tc.reason || got.GetMaybeDone() != tc.maybeDone {
			t.Errorf("ToConnect(%v) = %v with detail %v; want Unavailable with reason %s, maybe_done %t", tc.err, ce, got, tc.reason, tc.maybeDone)
		}
	}
}
