package statedb

import (
	corpusv1 "corpus/proto/corpus/v1"
)

// RegistryLogin returns the login of registry host, or nil.
func (v *Snap) RegistryLogin(host string) *corpusv1.RegistryLogin {
	return first[*corpusv1.RegistryLogin](v, TableRegistryLogins, "id", host)
}

// RegistryLogins returns every registry login sorted by host.
func (v *Snap) RegistryLogins() []*corpusv1.RegistryLogin {
	return all[*corpusv1.RegistryLogin](v, TableRegistryLogins, "id")
}
