package api

import (
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

func FindNode(view *state.Snap, name string) *corpusv1.Node {
	if n := view.NodeByName(name); n != nil {
		return n
	}
	return view.Node(name)
}
