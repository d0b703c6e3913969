package statedb

import (
	corpusv1 "corpus/proto/corpus/v1"
)

// Dump is the whole state as of v, as a snapshot holds it (but for its
// Version, which the state machine sets). The messages are the store's
// own: callers must not change them.
func (v *Snap) Dump() *corpusv1.Snapshot {
	snap := &corpusv1.Snapshot{
		Config: v.Config(),
		Nodes:  v.Nodes(),
		Guests: v.Guests(),
		Index:  v.Index(),
	}
	snap.JoinTokens = all[*corpusv1.JoinToken](v, TableTokens, "id")
	snap.Routes = v.Routes()
	snap.DnsRecords = v.DNSRecords()
	snap.Volumes = v.Volumes()
	snap.Users = v.Users()
	snap.Projects = v.Projects()
	snap.Releases = v.AllReleases()
	snap.Coordinators = v.Coordinators()
	snap.Audit = v.Audit()
	snap.UserTokens = v.UserTokens("")
	snap.Keyring = v.Keyring()
	snap.Services = v.Services()
	snap.Backups = v.Backups("")
	snap.Acme = v.Acme()
	snap.Certificates = v.Certificates()
	snap.Extensions = v.Extensions()
	snap.RegistryLogins = v.RegistryLogins()
	if cv := v.ClusterVersion(); !cv.IsZero() {
		snap.ClusterVersion = cv.String()
	}
	return snap
}
