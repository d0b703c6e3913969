// Package snapshot serves SnapshotService: a consistent copy of the
// control plane taken on the leader, sealed with a key the operator's
// client derived, streamed to the client that writes the file
// (internal/snapshotfile).
package snapshot

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"corpus/coordinator/api"
	"corpus/internal/seal"
	"corpus/internal/snapshotfile"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Taker takes a snapshot on the leader. A replica that is not the leader
// relays the call to it (Relay); Take is only called on the leader.
type Taker interface {
	// Take forces a Raft snapshot after every committed entry is applied
	// and returns it.
	Take(ctx context.Context) (*snapshotfile.Taken, error)
	// Relay passes the call to the leader and its chunks to send; it
	// returns api.ErrNotLeader (wrapped) when no leader is known or the
	// leader does not answer.
	Relay(ctx context.Context, req *corpusv1.SaveSnapshotRequest, send func(*corpusv1.SnapshotChunk) error) error
}

// chunkSize is the size of the payload's chunks on the stream.
const chunkSize = 1 << 20

// New returns the handler of SnapshotService; b.Group must be a Taker
// for it to take snapshots.
func New(b *api.Backend) corpusv1connect.SnapshotServiceHandler {
	t, _ := b.Group.(Taker)
	return &service{b: b, taker: t}
}

type service struct {
	b     *api.Backend
	taker Taker
}

func (s *service) SaveSnapshot(ctx context.Context, req *connect.Request[corpusv1.SaveSnapshotRequest], stream *connect.ServerStream[corpusv1.SnapshotChunk]) error {
	if len(req.Msg.Key) != seal.KeySize {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the snapshot key has %d bytes, want %d (derived by the client from the key file)", len(req.Msg.Key), seal.KeySize))
	}
	if s.taker == nil {
		return connect.NewError(connect.CodeUnimplemented, errors.New("this coordinator cannot take snapshots"))
	}
	if _, leads := s.b.Group.Leader(); !leads {
		return api.ToConnect(s.taker.Relay(ctx, req.Msg, stream.Send))
	}
	taken, err := s.taker.Take(ctx)
	if err != nil {
		return api.ToConnect(err)
	}
	h, err := snapshotfile.NewHeader(taken.Index, taken.Term, taken.State, s.b.Now())
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	payload, err := snapshotfile.Seal(req.Msg.Key, h, &corpusv1.SnapshotContents{State: taken.State, CaCert: taken.CACert, CaKey: taken.CAKey})
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	if err := stream.Send(&corpusv1.SnapshotChunk{Header: h}); err != nil {
		return err
	}
	for len(payload) > 0 {
		n := min(len(payload), chunkSize)
		if err := stream.Send(&corpusv1.SnapshotChunk{Data: payload[:n]}); err != nil {
			return err
		}
		payload = payload[n:]
	}
	return nil
}
