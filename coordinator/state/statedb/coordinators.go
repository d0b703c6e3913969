package statedb

import (
	"sort"

	corpusv1 "corpus/proto/corpus/v1"
)

// Coordinator returns the replica with that id, or nil.
func (v *Snap) Coordinator(id string) *corpusv1.Coordinator {
	return first[*corpusv1.Coordinator](v, TableCoordinators, "id", id)
}

// Coordinators returns every known replica sorted by id.
func (v *Snap) Coordinators() []*corpusv1.Coordinator {
	out := all[*corpusv1.Coordinator](v, TableCoordinators, "id")
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}
