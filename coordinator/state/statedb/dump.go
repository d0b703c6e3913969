package statedb

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-memdb"

	"corpus/coordinator/compat"
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

// Load makes a database of a snapshot's state, at cluster version cv
// (which the state machine checked).
func Load(snap *corpusv1.Snapshot, cv compat.Version) (*memdb.MemDB, error) {
	db, err := NewDB()
	if err != nil {
		return nil, fmt.Errorf("new state: %w", err)
	}
	txn := db.Txn(true)
	defer txn.Abort()
	meta := func(key string, v any) error {
		if err := txn.Insert(TableMeta, &Meta{Key: key, Value: v}); err != nil {
			return fmt.Errorf("restoring %s: %w", key, err)
		}
		return nil
	}
	var errs []error
	if snap.Config != nil {
		errs = append(errs, meta(MetaConfig, snap.Config))
	}
	if snap.Keyring != nil {
		errs = append(errs, meta(MetaKeyring, snap.Keyring))
	}
	if !cv.IsZero() {
		errs = append(errs, meta(MetaClusterVersion, cv))
	}
	if snap.Acme != nil {
		errs = append(errs, meta(MetaAcme, snap.Acme))
	}
	// The tables of rows, as many as the snapshot has.
	errs = append(errs,
		InsertAll(txn, TableCertificates, snap.Certificates),
		InsertAll(txn, TableExtensions, snap.Extensions),
		InsertAll(txn, TableRegistryLogins, snap.RegistryLogins),
		meta(MetaIndex, snap.Index),
		InsertAll(txn, TableNodes, snap.Nodes),
		InsertAll(txn, TableGuests, snap.Guests),
		InsertAll(txn, TableTokens, snap.JoinTokens),
		InsertAll(txn, TableRoutes, snap.Routes),
		InsertAll(txn, TableDNS, snap.DnsRecords),
		InsertAll(txn, TableVolumes, snap.Volumes),
		InsertAll(txn, TableUsers, snap.Users),
		InsertAll(txn, TableProjects, snap.Projects),
		InsertAll(txn, TableReleases, snap.Releases),
		InsertAll(txn, TableCoordinators, snap.Coordinators),
		InsertAll(txn, TableAudit, snap.Audit),
		InsertAll(txn, TableUserTokens, snap.UserTokens),
		InsertAll(txn, TableServices, snap.Services),
		InsertAll(txn, TableBackups, snap.Backups),
	)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	txn.Commit()
	return db, nil
}
