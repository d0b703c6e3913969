// Package snapshot serves SnapshotService: a consistent copy of the
// control plane taken on the leader, sealed with a key the operator's
// client derived, streamed to the client that writes the file
// (internal/snapshotfile); and such a file sent back, checked and
// installed into the running group on the leader.
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

// Restorer installs a snapshot into the running group. A replica that
// is not the leader relays the call to it (RelayRestore); Restore is
// only called on the leader.
type Restorer interface {
	// Restore checks the opened snapshot h describes, refuses one of
	// another cluster unless force (snapshotfile.ErrOtherCluster), and
	// installs it through Raft: every replica takes its state.
	Restore(ctx context.Context, h *corpusv1.SnapshotHeader, c *corpusv1.SnapshotContents, force bool) (*corpusv1.RestoreSnapshotResponse, error)
	// RelayRestore passes the call (its first message and the payload)
	// to the leader; errors as Taker.Relay's.
	RelayRestore(ctx context.Context, first *corpusv1.RestoreSnapshotRequest, payload []byte) (*corpusv1.RestoreSnapshotResponse, error)
}

// maxRestore bounds the payload of a restore: it is held in memory, as
// the state it holds is on every replica.
const maxRestore = 1 << 30

// New returns the handler of SnapshotService; b.Group must be a Taker
// for it to take snapshots and a Restorer to restore them.
func New(b *api.Backend) corpusv1connect.SnapshotServiceHandler {
	t, _ := b.Group.(Taker)
	r, _ := b.Group.(Restorer)
	return &service{b: b, taker: t, restorer: r}
}

type service struct {
	b        *api.Backend
	taker    Taker
	restorer Restorer
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
	return snapshotfile.Chunks(payload, func(b []byte) error { return stream.Send(&corpusv1.SnapshotChunk{Data: b}) })
}

func (s *service) RestoreSnapshot(ctx context.Context, stream *connect.ClientStream[corpusv1.RestoreSnapshotRequest]) (*connect.Response[corpusv1.RestoreSnapshotResponse], error) {
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return nil, err
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no snapshot sent"))
	}
	first := stream.Msg()
	h := first.Header
	if h == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the first message of a restore carries the snapshot's header"))
	}
	if len(first.Key) != seal.KeySize {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the snapshot key has %d bytes, want %d (derived by the client from the key file)", len(first.Key), seal.KeySize))
	}
	if h.PayloadSize > maxRestore {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("a snapshot of %d bytes is over the %d a restore takes", h.PayloadSize, maxRestore))
	}
	if s.restorer == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this coordinator cannot restore snapshots"))
	}
	// Grown as it comes, not as the header claims.
	payload := append([]byte(nil), first.Data...)
	for stream.Receive() {
		m := stream.Msg()
		if m.Header != nil || m.Key != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("only the first message of a restore carries the header and key"))
		}
		if uint64(len(payload)+len(m.Data)) > h.PayloadSize {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%w: more data than the header's %d bytes", snapshotfile.ErrCorrupt, h.PayloadSize))
		}
		payload = append(payload, m.Data...)
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	if _, leads := s.b.Group.Leader(); !leads {
		res, err := s.restorer.RelayRestore(ctx, &corpusv1.RestoreSnapshotRequest{Header: h, Key: first.Key, Force: first.Force}, payload)
		if err != nil {
			return nil, api.ToConnect(err)
		}
		return connect.NewResponse(res), nil
	}
	if err := snapshotfile.CheckHeader(h); err != nil {
		return nil, restoreError(err)
	}
	if err := snapshotfile.Verify(h, payload); err != nil {
		return nil, restoreError(err)
	}
	c, err := snapshotfile.OpenWithKey(h, payload, first.Key)
	if err != nil {
		return nil, restoreError(err)
	}
	res, err := s.restorer.Restore(ctx, h, c, first.Force)
	if err != nil {
		return nil, restoreError(err)
	}
	return connect.NewResponse(res), nil
}

// restoreError maps why a snapshot was refused to its status: a file
// that is damaged or does not open is a bad argument; one this corpus
// cannot take, or another cluster's, a failed precondition.
func restoreError(err error) error {
	switch {
	case errors.Is(err, snapshotfile.ErrCorrupt), errors.Is(err, snapshotfile.ErrNotSnapshot), errors.Is(err, snapshotfile.ErrWrongKey):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, snapshotfile.ErrNewerFormat), errors.Is(err, snapshotfile.ErrOtherCluster):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return api.ToConnect(err)
}
