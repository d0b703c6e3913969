package statedb

import (
	"sort"

	corpusv1 "corpus/proto/corpus/v1"
)

// Volumes returns every volume, by name.
func (v *Snap) Volumes() []*corpusv1.Volume {
	out := all[*corpusv1.Volume](v, TableVolumes, "id")
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Volume returns the volume with that name, or nil.
func (v *Snap) Volume(name string) *corpusv1.Volume {
	return first[*corpusv1.Volume](v, TableVolumes, "name", name)
}

// VolumeByID returns the volume with that id, or nil.
func (v *Snap) VolumeByID(id string) *corpusv1.Volume {
	return first[*corpusv1.Volume](v, TableVolumes, "id", id)
}

// VolumeOfGuest returns the volume bound to a guest, or nil.
func (v *Snap) VolumeOfGuest(guestID string) *corpusv1.Volume {
	return first[*corpusv1.Volume](v, TableVolumes, "guest", guestID)
}

// VolumesOnNode returns the volumes on a node.
func (v *Snap) VolumesOnNode(nodeID string) []*corpusv1.Volume {
	return all[*corpusv1.Volume](v, TableVolumes, "node", nodeID)
}

// VolumesLeftOnNode returns the volumes that moved away from a node whose
// old copy is still there.
func (v *Snap) VolumesLeftOnNode(nodeID string) []*corpusv1.Volume {
	return all[*corpusv1.Volume](v, TableVolumes, "prev", nodeID)
}
