// Package snapshot serves SnapshotService: a consistent copy of the
// control plane taken on the leader, sealed with a key the operator's
// client derived, streamed to the client that writes the file
// (internal/snapshotfile).
package snapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/api"
	"corpus/internal/seal"
	"corpus/internal/snapshotfile"
	"corpus/internal/version"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Taken is a snapshot of the state machine as Raft took it, with the
// cluster CA beside it.
type Taken struct {
	Index, Term uint64
	// State is the state machine's snapshot (a corpusv1.Snapshot).
	State []byte
	// CACert and CAKey are the cluster CA (PEM).
	CACert, CAKey []byte
}

// Taker takes a snapshot on the leader. A replica that is not the leader
// relays the call to it (Relay); Take is only called on the leader.
type Taker interface {
	// Take forces a Raft snapshot after every committed entry is applied
	// and returns it.
	Take(ctx context.Context) (*Taken, error)
	// Relay passes the call to the leader and its chunks to send; it
	// returns api.ErrNotLeader (wrapped) when this replica leads or no
	// leader is known.
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
	h, err := Header(taken, s.b.Now())
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

// Header describes a snapshot taken: its cluster, place in the log,
// version and what it holds (the length of every list of the state's
// snapshot, by name). The checksum and key derivation are filled later.
func Header(t *Taken, now time.Time) (*corpusv1.SnapshotHeader, error) {
	var st corpusv1.Snapshot
	if err := proto.Unmarshal(t.State, &st); err != nil {
		return nil, fmt.Errorf("decoding the state's snapshot: %w", err)
	}
	if st.Config.GetClusterId() == "" {
		return nil, errors.New("the cluster is not bootstrapped yet: nothing to snapshot")
	}
	counts := map[string]uint64{}
	m := st.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if f.IsList() && f.Kind() == protoreflect.MessageKind {
			counts[string(f.Name())] = uint64(m.Get(f).List().Len())
		}
	}
	return &corpusv1.SnapshotHeader{
		FormatVersion: snapshotfile.FormatVersion,
		ClusterId:     st.Config.GetClusterId(),
		RaftIndex:     t.Index,
		RaftTerm:      t.Term,
		CorpusVersion: fmt.Sprintf("%s (commit %s)", version.Version, version.Get().Commit),
		CreatedAt:     timestamppb.New(now),
		Counts:        counts,
	}, nil
}
