package state_test

import (
	"bytes"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// epoch is the leader clock every test command carries.
var epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// replica is a store and the real FSM over it, fed log entries with
// increasing indexes, as Raft would.
type replica struct {
	t     testing.TB
	store *state.Store
	fsm   *state.FSM
	index uint64
	now   time.Time
}

func newReplica(t testing.TB) *replica {
	store := state.NewStore()
	return &replica{t: t, store: store, fsm: state.NewFSM(store, slog.New(slog.DiscardHandler)), now: epoch}
}

// apply commits cmd as the next log entry and returns its business error.
func (r *replica) apply(cmd *corpusv1.Command) error {
	r.t.Helper()
	data, err := state.Encode(proto.Clone(cmd).(*corpusv1.Command), r.now)
	if err != nil {
		r.t.Fatalf("Encode(%v) = %v", cmd, err)
	}
	r.index++
	got := r.fsm.Apply(&raft.Log{Index: r.index, Type: raft.LogCommand, Data: data})
	res, ok := got.(*state.Result)
	if !ok {
		r.t.Fatalf("Apply(%v) = %T, want *state.Result", cmd, got)
	}
	if res.Index != r.index {
		r.t.Fatalf("Apply(%v).Index = %d, want %d", cmd, res.Index, r.index)
	}
	return res.Err
}

// must applies commands that have to succeed.
func (r *replica) must(cmds ...*corpusv1.Command) {
	r.t.Helper()
	for _, c := range cmds {
		if err := r.apply(c); err != nil {
			r.t.Fatalf("Apply(%v) = %v, want success", c, err)
		}
	}
}

// dump is the whole state, as a snapshot would write it.
func (r *replica) dump() *corpusv1.Snapshot {
	r.t.Helper()
	return dump(r.t, r.fsm)
}

func dump(t testing.TB, fsm *state.FSM) *corpusv1.Snapshot {
	t.Helper()
	out := persisted(t, fsm)
	// The audit log records refused commands too, and the applied index
	// and time count them; tests of "nothing changed" compare the rest
	// (TestAudit, TestStoreApplied and TestClusterTimeNeverGoesBack check
	// those).
	out.Audit, out.AppliedIndex, out.AppliedTime = nil, 0, nil
	return out
}

// persisted is fsm's snapshot as Persist writes it, all of it.
func persisted(t testing.TB, fsm *state.FSM) *corpusv1.Snapshot {
	t.Helper()
	snap, err := fsm.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot() = %v", err)
	}
	defer snap.Release()
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("Persist() = %v", err)
	}
	if !sink.closed {
		t.Fatalf("Persist() left the sink open")
	}
	var out corpusv1.Snapshot
	if err := proto.Unmarshal(sink.Bytes(), &out); err != nil {
		t.Fatalf("decoding persisted snapshot: %v", err)
	}
	return &out
}

// memSink is an in-memory raft.SnapshotSink.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string            { return "mem" }
func (s *memSink) Close() error          { s.closed = true; return nil }
func (s *memSink) Cancel() error         { s.cancelled = true; return nil }
func (s *memSink) reader() io.ReadCloser { return io.NopCloser(bytes.NewReader(s.Bytes())) }

// Command builders. Every id and secret hash is fixed so tables can name
// them.

const (
	nodeID    = "n1id"
	nodeName  = "n1"
	tokenID   = "tok1"
	tokenHash = "hash-of-secret"
	guestID   = "g1id"
	guestName = "web"
)

func bootstrapCmd(clusterID string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_BootstrapCluster{BootstrapCluster: &corpusv1.BootstrapCluster{
		Config: &corpusv1.ClusterConfig{ClusterId: clusterID, OpsTokenHash: "ops-hash", AgentKey: "agent-key"},
	}}}
}

func tokenCmd(id, hash string, expires time.Time) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_CreateJoinToken{CreateJoinToken: &corpusv1.CreateJoinToken{
		Token: &corpusv1.JoinToken{Id: id, SecretHash: hash, CreatedAt: timestamppb.New(epoch), ExpiresAt: timestamppb.New(expires)},
	}}}
}

func enrollCmd(tokID, hash, id, name string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_EnrollNode{EnrollNode: &corpusv1.EnrollNode{
		TokenId: tokID, TokenSecretHash: hash,
		Node: &corpusv1.Node{Id: id, Name: name, Status: state.NodeInitializing, Mode: "dev", CertSerial: "node-serial"},
	}}}
}

func updateNodeCmd(id string, memory int64) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_UpdateNode{UpdateNode: &corpusv1.UpdateNode{
		NodeId:       id,
		Capacity:     &corpusv1.Resources{MemoryBytes: memory, CpuMillis: 4000, DiskBytes: 100 << 30},
		Drivers:      []*corpusv1.DriverInfo{{Name: "lxc", Healthy: true}},
		AgentAddress: "127.0.0.1:7410",
		AgentVersion: "test",
	}}}
}

func nodeStatusCmd(id, status string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_SetNodeStatus{SetNodeStatus: &corpusv1.SetNodeStatus{NodeId: id, Status: status}}}
}

func guestCmd(id, name string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_CreateGuest{CreateGuest: &corpusv1.CreateGuest{Guest: &corpusv1.Guest{
		Id: id, Name: name, DesiredState: state.DesiredRunning,
		Spec: &corpusv1.GuestSpec{Driver: "lxc", Image: "busybox", Resources: &corpusv1.Resources{MemoryBytes: 256 << 20, CpuMillis: 250, DiskBytes: 1 << 30}},
	}}}}
}

// updateGuestCmd updates guest name to guestCmd's spec changed by f.
func updateGuestCmd(name string, f func(*corpusv1.GuestSpec)) *corpusv1.Command {
	sp := guestCmd("", name).GetCreateGuest().Guest.Spec
	f(sp)
	return &corpusv1.Command{Cmd: &corpusv1.Command_UpdateGuest{UpdateGuest: &corpusv1.UpdateGuest{Name: name, Spec: sp}}}
}

func desiredCmd(name, desired string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_SetGuestDesired{SetGuestDesired: &corpusv1.SetGuestDesired{Name: name, DesiredState: desired}}}
}

func placeCmd(guestID, nodeID, reason string, modifyIndex uint64) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_PlaceGuest{PlaceGuest: &corpusv1.PlaceGuest{
		GuestId: guestID, NodeId: nodeID, Reason: reason, ModifyIndex: modifyIndex,
	}}}
}

func reportCmd(nodeID, guestID, observed, message string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_ReportGuests{ReportGuests: &corpusv1.ReportGuests{
		NodeId: nodeID,
		Guests: []*corpusv1.ObservedGuest{{GuestId: guestID, Observed: &corpusv1.GuestObserved{State: observed, Pid: 42, Message: message}}},
	}}}
}

// Fixtures: command sequences that bring a replica to a known state.

// cluster bootstraps and enrolls node n1 (ready).
func cluster() []*corpusv1.Command {
	return []*corpusv1.Command{
		bootstrapCmd("c1"),
		tokenCmd(tokenID, tokenHash, epoch.Add(time.Hour)),
		enrollCmd(tokenID, tokenHash, nodeID, nodeName),
		updateNodeCmd(nodeID, 8<<30),
	}
}

// withGuest is cluster plus guest web, unplaced.
func withGuest() []*corpusv1.Command {
	return append(cluster(), guestCmd(guestID, guestName))
}

// withPlacedGuest is withGuest with web placed on n1 (modify index 5 is
// the guest's create index in this sequence).
func withPlacedGuest() []*corpusv1.Command {
	return append(withGuest(), placeCmd(guestID, nodeID, "", 5))
}
