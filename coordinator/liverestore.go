package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/api/snapshot"
	"corpus/coordinator/compat"
	"corpus/coordinator/keyring"
	"corpus/internal/secret"
	"corpus/internal/snapshotfile"
	corpusv1 "corpus/proto/corpus/v1"
)

// Restore into the running group (corpus operator snapshot restore): the
// leader installs the snapshot's state through Raft's user restore, so
// every replica takes it, at an index past every entry the group had.
// The group keeps what makes it this group: its cluster id, CA, keys
// (operator token, agent and coordinator keys), replicas and cluster
// version (which never goes down). A snapshot of another cluster is
// refused unless forced; forced, its objects are taken under this
// group's identity, its keyring wrapped again for this group's CA, and
// its nodes, whose certificates another CA issued, enroll again. As
// with --restore, agents keep and report the guests created after the
// snapshot instead of destroying them (agent/orphans.go).

var _ snapshot.Restorer = (*Server)(nil)

// Restore implements snapshot.Restorer.
func (s *Server) Restore(ctx context.Context, h *corpusv1.SnapshotHeader, c *corpusv1.SnapshotContents, force bool) (*corpusv1.RestoreSnapshotResponse, error) {
	if !s.replica.isLeader() {
		return nil, s.replica.notLeader()
	}
	st, ca, err := decodeSnapshot(h, c)
	if err != nil {
		return nil, err
	}
	view := s.store.Read()
	group := view.Config()
	if h.ClusterId != group.GetClusterId() && !force {
		return nil, fmt.Errorf("%w: the snapshot is of cluster %s, this group is cluster %s; nothing changed (to take its objects into this cluster anyway, under this cluster's identity, give --force)",
			snapshotfile.ErrOtherCluster, h.ClusterId, group.GetClusterId())
	}
	own, err := s.clusterCA(view)
	if err != nil {
		return nil, err
	}
	if st.Keyring != nil && !bytes.Equal(c.CaCert, own.CertPEM) {
		if err := keyring.Rewrap(st.Keyring, ca, own); errors.Is(err, keyring.ErrWrongKEK) {
			return nil, fmt.Errorf("%w: the snapshot's keyring does not open with its CA (%v)", snapshotfile.ErrCorrupt, err)
		} else if err != nil {
			return nil, err
		}
	}
	restoreID := secret.Hex(8)
	cfg := st.Config
	cfg.ClusterId, cfg.OpsTokenHash, cfg.AgentKey, cfg.CoordinatorKey = group.ClusterId, group.OpsTokenHash, group.AgentKey, group.CoordinatorKey
	// This group's CA, whose key-encryption key the keyring is wrapped
	// for now.
	cfg.Ca = group.Ca
	cfg.Restore = &corpusv1.Restore{Id: restoreID, SnapshotIndex: h.RaftIndex}
	st.Coordinators = view.Coordinators()
	if cv, _ := compat.Parse(st.ClusterVersion); cv.Less(view.ClusterVersion()) {
		st.ClusterVersion = view.ClusterVersion().String()
	}
	if now := s.store.ClusterTime(); now != nil && (st.AppliedTime == nil || st.AppliedTime.AsTime().Before(now.AsTime())) {
		st.AppliedTime = now
	}
	timeout := 2 * time.Minute
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	// The restore's own index, written into the state before Raft
	// installs it: with the log quiet, Raft gives it last+1 (one past
	// every entry logged), so blocking reads and watches see the state
	// move forward, and a keyring opened before is opened again. Writes
	// proposed meanwhile wait and apply after it.
	last, release, err := s.replica.quiet(ctx, timeout)
	if err != nil {
		return nil, fmt.Errorf("quieting the log for the restore: %w", err)
	}
	defer release()
	index := last + 1
	st.Index, st.AppliedIndex = index, index
	if st.Keyring != nil {
		st.Keyring.ModifyIndex = index
	}
	data, err := proto.Marshal(st)
	if err != nil {
		return nil, err
	}
	if err := checkRestore(data); err != nil {
		return nil, err
	}
	counted, err := snapshotfile.NewHeader(index, 0, data, time.Now())
	if err != nil {
		return nil, err
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: last, Term: h.RaftTerm, Size: int64(len(data))}
	if err := s.replica.raft.Restore(meta, bytes.NewReader(data), timeout); err != nil {
		return nil, fmt.Errorf("installing the snapshot through raft: %w", err)
	}
	if got := s.store.Applied(); got != index {
		return nil, fmt.Errorf("the snapshot was installed, and this replica's state is at index %d, not %d", got, index)
	}
	res := &corpusv1.RestoreSnapshotResponse{
		ClusterId: group.ClusterId, SnapshotClusterId: h.ClusterId, SnapshotIndex: h.RaftIndex,
		RaftIndex: index, RaftTerm: s.replica.raft.CurrentTerm(), Counts: counted.Counts, RestoreId: restoreID,
	}
	for _, n := range counted.Counts {
		res.Objects += n
	}
	s.logger.Warn("restored a snapshot into the running group", "cluster_id", group.ClusterId, "snapshot_cluster_id", h.ClusterId,
		"snapshot_index", h.RaftIndex, "raft_index", index, "objects", res.Objects, "restore_id", restoreID, "taken_by", h.CorpusVersion)
	return res, nil
}

// RelayRestore implements snapshot.Restorer.
func (s *Server) RelayRestore(ctx context.Context, first *corpusv1.RestoreSnapshotRequest, payload []byte) (*corpusv1.RestoreSnapshotResponse, error) {
	c, addr, err := s.leaderSnapshots()
	if err != nil {
		return nil, err
	}
	stream := c.RestoreSnapshot(ctx)
	err = stream.Send(first)
	if err == nil {
		err = snapshotfile.Chunks(payload, func(b []byte) error { return stream.Send(&corpusv1.RestoreSnapshotRequest{Data: b}) })
	}
	res, cerr := stream.CloseAndReceive()
	if cerr != nil {
		return nil, leaderUnavailable(cerr, addr)
	}
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}
