package state

import (
	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// The database the state machine writes and its read views are package
// statedb's; the packages that read the state name them here.
type (
	Store      = statedb.Store
	Snap       = statedb.Snap
	ProjectRef = statedb.ProjectRef
	Instance   = statedb.Instance
)

// NewStore returns an empty store.
func NewStore() *Store { return statedb.NewStore() }

// Instances lists every guest of an environment, instance 1 first.
func Instances(e *corpusv1.ProjectEnv) []Instance { return statedb.Instances(e) }

// WebPort is the guest port an environment's domains route to.
func WebPort(env *corpusv1.ProjectEnv) int32 { return statedb.WebPort(env) }
