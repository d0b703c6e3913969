package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/raft"

	"corpus/coordinator/api"
	"corpus/coordinator/api/snapshot"
	"corpus/internal/rpc"
	"corpus/internal/snapshotfile"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Snapshots of the control plane for operators (corpus operator snapshot
// save): Raft's own snapshot of the state machine, taken on the leader
// once every committed entry is applied, with the cluster CA beside it.

var _ snapshot.Taker = (*Server)(nil)

// Take implements snapshot.Taker.
func (s *Server) Take(ctx context.Context) (*snapshotfile.Taken, error) {
	if !s.replica.isLeader() {
		return nil, s.replica.notLeader()
	}
	timeout := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	ca, err := s.clusterCA(s.store.Read())
	if err != nil {
		return nil, err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	meta, state, err := s.replica.take(timeout)
	if err != nil {
		return nil, err
	}
	// A rotation started meanwhile: the keyring in state may be wrapped
	// for either CA until it ends.
	if now, err := s.clusterCA(s.store.Read()); err != nil || now != ca {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the cluster CA changed while the snapshot was taken; take it again"))
	}
	return &snapshotfile.Taken{Index: meta.Index, Term: meta.Term, State: state, CACert: ca.CertPEM, CAKey: key}, nil
}

// take snapshots the state machine as of every entry committed so far (a
// barrier first, as Consul's snapshot save does) and reads it back. When
// nothing was written since the last snapshot, that one is current.
func (r *replica) take(timeout time.Duration) (*raft.SnapshotMeta, []byte, error) {
	if err := r.raft.Barrier(timeout).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			// Deposed meanwhile (an election, on a loaded machine):
			// Unavailable, which clients ask again, not Internal.
			return nil, nil, r.notLeader()
		}
		return nil, nil, fmt.Errorf("waiting for committed entries to apply: %w", err)
	}
	f := r.raft.Snapshot()
	err := f.Error()
	if errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return r.latest()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("taking a raft snapshot: %w", err)
	}
	meta, rc, err := f.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("opening the raft snapshot: %w", err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the raft snapshot: %w", err)
	}
	return meta, data, nil
}

// latest reads the newest snapshot on disk.
func (r *replica) latest() (*raft.SnapshotMeta, []byte, error) {
	list, err := r.snaps.List()
	if err != nil || len(list) == 0 {
		return nil, nil, fmt.Errorf("listing raft snapshots: %d found, %v", len(list), err)
	}
	meta, rc, err := r.snaps.Open(list[0].ID)
	if err != nil {
		return nil, nil, fmt.Errorf("opening raft snapshot %s: %w", list[0].ID, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("reading raft snapshot %s: %w", list[0].ID, err)
	}
	return meta, data, nil
}

// Relay implements snapshot.Taker: the leader's chunks are passed on as
// they come.
func (s *Server) Relay(ctx context.Context, req *corpusv1.SaveSnapshotRequest, send func(*corpusv1.SnapshotChunk) error) error {
	c, addr, err := s.leaderSnapshots()
	if err != nil {
		return err
	}
	stream, err := c.SaveSnapshot(ctx, connect.NewRequest(req))
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
		if err := send(stream.Msg()); err != nil {
			return err
		}
	}
	return leaderUnavailable(stream.Err(), addr)
}

// leaderSnapshots is a client of the leader's SnapshotService, and the
// leader's address.
func (s *Server) leaderSnapshots() (corpusv1connect.SnapshotServiceClient, string, error) {
	_, addr, err := s.leaderClient()
	if err != nil {
		return nil, "", err
	}
	c := corpusv1connect.NewSnapshotServiceClient(s.peerHTTP, rpc.BaseURL(addr),
		connect.WithInterceptors(rpc.Bearer(rpc.CoordinatorCredentialPrefix+s.store.Read().Config().GetCoordinatorKey())))
	return c, addr, nil
}

// leaderUnavailable says a relayed call's leader at addr did not answer
// as api.ErrNotLeader, which clients retry; other errors pass as they are.
func leaderUnavailable(err error, addr string) error {
	if connect.CodeOf(err) == connect.CodeUnavailable {
		return fmt.Errorf("%w (the leader at %s did not answer: %v)", api.ErrNotLeader, addr, err)
	}
	return err
}
