package statedb

import "corpus/coordinator/compat"

// MetaClusterVersion holds the group's cluster version (a compat.Version).
const MetaClusterVersion = "cluster_version"

// ClusterVersion returns the group's cluster version: the zero Version
// until the leader first set it.
func (v *Snap) ClusterVersion() compat.Version {
	ch, raw, err := v.txn.FirstWatch(TableMeta, "id", MetaClusterVersion)
	if err != nil {
		return compat.Version{}
	}
	v.ws.Add(ch)
	if raw == nil {
		return compat.Version{}
	}
	return raw.(*Meta).Value.(compat.Version)
}
