package statedb

import (
	corpusv1 "corpus/proto/corpus/v1"
)

// Extension returns the extension of that name, or nil.
func (v *Snap) Extension(name string) *corpusv1.Extension {
	return first[*corpusv1.Extension](v, TableExtensions, "id", name)
}

// Extensions returns every extension sorted by name.
func (v *Snap) Extensions() []*corpusv1.Extension {
	return all[*corpusv1.Extension](v, TableExtensions, "id")
}
