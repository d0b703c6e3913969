package state_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/compat"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

func clusterVersionCmd(v string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_SetClusterVersion{SetClusterVersion: &corpusv1.SetClusterVersion{Version: v}}}
}

// TestClusterVersionGatesIDRanges: until the cluster version allows id
// ranges, placement gives none (as a replica of a release without them
// would, so both keep the same state); once it does, the guests placed
// meanwhile get theirs, the same on every replica.
func TestClusterVersionGatesIDRanges(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(append(cluster(), rangesNodeCmd(nodeID, 5), guestCmd("g1", "b"), guestCmd("g2", "a"))...)
	r.must(placeAllCmd(placement("g1", nodeID, 0), placement("g2", nodeID, 0)))
	if got := r.ranges("g1", "g2"); !sameRanges(got, []uint32{0, 0}) {
		t.Fatalf("ranges with no cluster version = %v, want 0 0 (no replica gives any yet)", got)
	}
	if got := r.store.Read().ClusterVersion(); !got.IsZero() {
		t.Fatalf("ClusterVersion() = %v before any was set, want none", got)
	}
	r.must(clusterVersionCmd("v0.1"))
	if got := r.ranges("g1", "g2"); !sameRanges(got, []uint32{2, 1}) {
		t.Errorf("ranges once the cluster version is v0.1 = %v, want b 2, a 1", got)
	}
	if got := r.store.Read().ClusterVersion(); got != (compat.Version{Major: 0, Minor: 1}) {
		t.Errorf("ClusterVersion() = %v, want v0.1", got)
	}
}

// TestClusterVersionMoves: it only rises; setting it again is a no-op,
// lower or garbage is refused and changes nothing; it survives a
// snapshot.
func TestClusterVersionMoves(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(append(cluster(), clusterVersionCmd("v0.1"))...)
	before := r.dump()
	before.Index = 0
	for _, tt := range []struct {
		version string
		want    error
	}{
		{"v0.1", nil},
		{"", state.ErrInvalid},
		{"banana", state.ErrInvalid},
		{"v0.0", state.ErrInvalid},
	} {
		if err := r.apply(clusterVersionCmd(tt.version)); !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
			t.Errorf("SetClusterVersion(%q) = %v, want %v", tt.version, err, tt.want)
		}
	}
	after := r.dump()
	after.Index = 0
	if !proto.Equal(after, before) {
		t.Errorf("refused or repeated SetClusterVersion changed the state")
	}
	other := newReplica(t)
	if err := other.fsm.Restore(persistToFile(t, r.fsm, r.index)); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	if got := other.store.Read().ClusterVersion(); got != (compat.Version{Major: 0, Minor: 1}) {
		t.Errorf("restored ClusterVersion() = %v, want v0.1", got)
	}
}

// TestClusterVersionNewerThanBinary: an entry raising the cluster version
// past this binary stops the replica with what to do; so does a
// snapshot of such a group, or of a newer format, before it changes
// anything.
func TestClusterVersionNewerThanBinary(t *testing.T) {
	t.Parallel()
	next := compat.Version{Major: compat.Current.Major, Minor: compat.Current.Minor + 1}
	wantMsg := "this group's cluster version is " + next.String() + "; this binary is " + compat.Current.String() + ": a downgrade after the group moved on is not possible; run " + next.String() + " or later"

	r := newReplica(t)
	r.must(cluster()...)
	func() {
		defer func() {
			msg, _ := recover().(string)
			if !strings.Contains(msg, wantMsg) {
				t.Errorf("applying SetClusterVersion(%s) panicked with %q, want %q", next, msg, wantMsg)
			}
		}()
		_ = r.apply(clusterVersionCmd(next.String()))
	}()

	for _, tt := range []struct {
		name string
		edit func(*corpusv1.Snapshot)
		want string
	}{
		{"newer cluster version", func(s *corpusv1.Snapshot) { s.ClusterVersion = next.String() }, wantMsg},
		{"newer format", func(s *corpusv1.Snapshot) { s.Version = state.CommandVersion + 1 }, "snapshot format version 2 is newer than this replica reads (1)"},
	} {
		src := newReplica(t)
		src.must(cluster()...)
		snap := persisted(t, src.fsm)
		tt.edit(snap)
		data, err := proto.Marshal(snap)
		if err != nil {
			t.Fatal(err)
		}
		dst := newReplica(t)
		dst.must(cluster()...)
		before := dst.dump()
		err = dst.fsm.Restore(io.NopCloser(bytes.NewReader(data)))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Restore() = %v, want an error saying %q", tt.name, err, tt.want)
		}
		if !proto.Equal(dst.dump(), before) {
			t.Errorf("%s: a refused Restore changed the state", tt.name)
		}
	}
}

// TestUnknownEntryNamesItsRelease: a replica stopping on an entry kind
// it does not know names the field and the release that applies it,
// which the proposer stamped.
func TestUnknownEntryNamesItsRelease(t *testing.T) {
	t.Parallel()
	data, err := proto.Marshal(&corpusv1.Command{Version: state.CommandVersion, Needs: "v7.3"})
	if err != nil {
		t.Fatal(err)
	}
	data = protowire.AppendTag(data, 999, protowire.BytesType)
	data = protowire.AppendBytes(data, []byte("future"))
	r := newReplica(t)
	defer func() {
		msg, _ := recover().(string)
		want := "state: unknown command at index 1 (Command field 999, a kind this replica does not know); it needs corpus v7.3 or later and this replica is " + compat.Current.String()
		if !strings.HasPrefix(msg, want) {
			t.Errorf("Apply() panicked with %q, want %q", msg, want)
		}
	}()
	r.fsm.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data})
}

// TestUnknownFieldsRoundTrip: fields a newer release added to an object
// survive this replica's state and snapshots, so plain new data needs no
// gate (a newer replica restoring this one's snapshot finds them).
func TestUnknownFieldsRoundTrip(t *testing.T) {
	t.Parallel()
	future := protowire.AppendTag(nil, 999, protowire.BytesType)
	future = protowire.AppendBytes(future, []byte("newer release's field"))
	cmd := guestCmd(guestID, guestName)
	cmd.GetCreateGuest().Guest.ProtoReflect().SetUnknown(future)
	cmd.GetCreateGuest().Guest.Spec.ProtoReflect().SetUnknown(future)

	r := newReplica(t)
	r.must(append(cluster(), cmd)...)
	other := newReplica(t)
	if err := other.fsm.Restore(persistToFile(t, r.fsm, r.index)); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	g := other.store.Read().Guest(guestID)
	if !bytes.Equal(g.ProtoReflect().GetUnknown(), future) || !bytes.Equal(g.GetSpec().ProtoReflect().GetUnknown(), future) {
		t.Errorf("guest's unknown fields after a snapshot = %x and %x, want %x", g.ProtoReflect().GetUnknown(), g.GetSpec().ProtoReflect().GetUnknown(), future)
	}
}
