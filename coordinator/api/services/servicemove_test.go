package services

import (
	"testing"

	"corpus/coordinator/state"
	"corpus/coordinator/state/statetest"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestKeptVolume: a service made again finds the newest unbound volume
// its guests left (svc-NAME or svc-NAME-N after a move), never one on a
// node that is down, bound, being deleted, or another service's.
func TestKeptVolume(t *testing.T) {
	vol := func(name, node, guest string, index uint64) *corpusv1.Volume {
		return &corpusv1.Volume{Id: "v-" + name, Name: name, NodeId: node, GuestId: guest, DesiredState: state.VolumePresent, CreateIndex: index}
	}
	deleting := vol("svc-db-4", "up", "", 9)
	deleting.DesiredState = state.VolumeDeleted
	view := statetest.Store(t, &corpusv1.Snapshot{
		Nodes: []*corpusv1.Node{{Id: "up", Name: "n1", Status: state.NodeReady}, {Id: "dead", Name: "n2", Status: state.NodeDown}},
		Volumes: []*corpusv1.Volume{
			vol("svc-db", "up", "", 1),
			vol("svc-db-2", "up", "", 3),
			vol("svc-db-3", "dead", "", 5),
			deleting,
			vol("svc-db-5", "up", "g-other", 10),
			vol("svc-dbx", "up", "", 11),
			vol("svc-db-02", "up", "", 12),
			vol("svc-db-extra", "up", "", 13),
			vol("svc-lost", "dead", "", 14),
		}}).Read()
	if v := keptVolume(view, "db"); v.GetName() != "svc-db-2" {
		t.Errorf("keptVolume(db) = %v, want svc-db-2", v)
	}
	if v := keptVolume(view, "other"); v != nil {
		t.Errorf("keptVolume(other) = %v, want none", v)
	}
	// A service's own volume on a node that is down is none to make it
	// with, and the name a new one would take.
	if v := strandedVolume(view, "lost"); v.GetName() != "svc-lost" {
		t.Errorf("strandedVolume(lost) = %v, want svc-lost", v)
	}
	if v := keptVolume(view, "lost"); v != nil {
		t.Errorf("keptVolume(lost) = %v, want none (its node is down)", v)
	}
	if v := strandedVolume(view, "db"); v != nil {
		t.Errorf("strandedVolume(db) = %v, want none (svc-db is on a node that is up)", v)
	}
	if name, err := replacementName(view, "db"); err != nil || name != "svc-db-6" {
		t.Errorf("replacementName(db) = %q, %v; want svc-db-6 (2 to 5 are taken)", name, err)
	}
}
