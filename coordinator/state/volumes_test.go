package state_test

import (
	"errors"
	"testing"
	"time"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

func volumeGuestCmd(id, name string, vs *corpusv1.VolumeSpec) *corpusv1.Command {
	c := guestCmd(id, name)
	c.GetCreateGuest().Guest.Spec.Volume = vs
	return c
}

func reportVolumeCmd(nodeID, volumeID, st string) *corpusv1.Command {
	return &corpusv1.Command{Cmd: &corpusv1.Command_ReportVolumes{ReportVolumes: &corpusv1.ReportVolumes{
		NodeId: nodeID, Volumes: []*corpusv1.ObservedVolume{{VolumeId: volumeID, Observed: &corpusv1.VolumeObserved{State: st}}},
	}}}
}

// TestVolumesLifecycle: a guest's volume is created with it, goes to the
// guest's node, outlives the guest, binds to a replacement on the same
// node only, and is deleted by purge once its agent confirms.
func TestVolumesLifecycle(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(cluster()...)
	r.must(tokenCmd("tok2", "h2", epoch.Add(time.Hour)), enrollCmd("tok2", "h2", "n2id", "n2"), updateNodeCmd("n2id", 8<<30))
	r.must(volumeGuestCmd("dbid", "db", &corpusv1.VolumeSpec{SizeBytes: 64 << 20, Path: "/srv/data"}))
	v := r.store.Read().Volume("db")
	if v == nil || v.GuestId != "dbid" || v.NodeId != "" || v.SizeBytes != 64<<20 {
		t.Fatalf("volume after create = %v, want db bound to dbid, unplaced", v)
	}
	r.must(placeCmd("dbid", nodeID, "", 0))
	if got := r.store.Read().Volume("db").NodeId; got != nodeID {
		t.Fatalf("volume node after placement = %q, want %q", got, nodeID)
	}
	// A second guest cannot take a bound volume or a taken name.
	for _, c := range []*corpusv1.Command{
		volumeGuestCmd("xid", "x", &corpusv1.VolumeSpec{UseVolume: "db"}),
		volumeGuestCmd("yid", "y", &corpusv1.VolumeSpec{UseVolume: "nope"}),
	} {
		if err := r.apply(c); err == nil {
			t.Errorf("Apply(%v) = nil, want a refusal", c)
		}
	}
	if err := r.apply(&corpusv1.Command{Cmd: &corpusv1.Command_DeleteVolume{DeleteVolume: &corpusv1.DeleteVolume{Name: "db"}}}); !errors.Is(err, state.ErrBadTransition) {
		t.Errorf("deleting a bound volume = %v, want ErrBadTransition", err)
	}
	// Deleting the guest keeps the volume, unbound, on its node.
	r.must(desiredCmd("db", state.DesiredDeleted), reportCmd(nodeID, "dbid", state.ObservedDeleted, ""))
	if v := r.store.Read().Volume("db"); v == nil || v.GuestId != "" || v.NodeId != nodeID {
		t.Fatalf("volume after guest delete = %v, want kept, unbound, on n1", v)
	}
	// A replacement binds it and may only go to n1.
	r.must(volumeGuestCmd("db2id", "db2", &corpusv1.VolumeSpec{UseVolume: "db", Path: "/srv/data"}))
	if err := r.apply(placeCmd("db2id", "n2id", "", 0)); !errors.Is(err, state.ErrBadTransition) {
		t.Errorf("placing db2 on n2 = %v, want ErrBadTransition (its volume is on n1)", err)
	}
	r.must(placeCmd("db2id", nodeID, "", 0))
	// Purge: the volume is deleted after the guest, once its agent says so.
	r.must(&corpusv1.Command{Cmd: &corpusv1.Command_SetGuestDesired{SetGuestDesired: &corpusv1.SetGuestDesired{
		Name: "db2", DesiredState: state.DesiredDeleted, PurgeVolume: true,
	}}})
	r.must(reportCmd(nodeID, "db2id", state.ObservedDeleted, ""))
	v = r.store.Read().Volume("db")
	if v == nil || v.DesiredState != state.VolumeDeleted {
		t.Fatalf("volume after purge = %v, want desired deleted until its agent confirms", v)
	}
	r.must(reportVolumeCmd("n2id", v.Id, state.ObservedDeleted)) // another node's word does not count
	if r.store.Read().Volume("db") == nil {
		t.Fatalf("volume removed on another node's report")
	}
	r.must(reportVolumeCmd(nodeID, v.Id, state.ObservedDeleted))
	if got := r.store.Read().Volume("db"); got != nil {
		t.Errorf("volume after its agent confirmed deletion = %v, want gone", got)
	}
}

// TestVolumeMoveState: a move puts the volume on the new node and keeps
// the old one until its agent says its copy is gone; bound volumes do not
// move.
func TestVolumeMoveState(t *testing.T) {
	t.Parallel()
	r := newReplica(t)
	r.must(cluster()...)
	r.must(tokenCmd("tok2", "h2", epoch.Add(time.Hour)), enrollCmd("tok2", "h2", "n2id", "n2"), updateNodeCmd("n2id", 8<<30))
	r.must(volumeGuestCmd("dbid", "db", &corpusv1.VolumeSpec{SizeBytes: 64 << 20, Path: "/srv/data"}), placeCmd("dbid", nodeID, "", 0))
	move := &corpusv1.Command{Cmd: &corpusv1.Command_MoveVolume{MoveVolume: &corpusv1.MoveVolume{Name: "db", NodeId: "n2id"}}}
	if err := r.apply(move); !errors.Is(err, state.ErrBadTransition) {
		t.Fatalf("moving a bound volume = %v, want ErrBadTransition", err)
	}
	r.must(desiredCmd("db", state.DesiredDeleted), reportCmd(nodeID, "dbid", state.ObservedDeleted, ""))
	r.must(move)
	v := r.store.Read().Volume("db")
	if v.NodeId != "n2id" || v.PreviousNodeId != nodeID {
		t.Fatalf("volume after move = node %q previous %q, want n2id and %q", v.NodeId, v.PreviousNodeId, nodeID)
	}
	if left := r.store.Read().VolumesLeftOnNode(nodeID); len(left) != 1 {
		t.Fatalf("VolumesLeftOnNode(n1) = %v, want the moved volume", left)
	}
	removed := &corpusv1.Command{Cmd: &corpusv1.Command_ReportVolumes{ReportVolumes: &corpusv1.ReportVolumes{
		NodeId: nodeID, Volumes: []*corpusv1.ObservedVolume{{VolumeId: v.Id, OldCopyRemoved: true}},
	}}}
	r.must(removed)
	if v := r.store.Read().Volume("db"); v.PreviousNodeId != "" || v.NodeId != "n2id" {
		t.Errorf("volume after the old copy was removed = %v, want on n2 with no previous node", v)
	}
}
