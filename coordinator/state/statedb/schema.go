package statedb

import (
	"fmt"

	"github.com/hashicorp/go-memdb"
)

const (
	TableNodes    = "nodes"
	TableGuests   = "guests"
	TableTokens   = "tokens"
	TableRoutes   = "routes"
	TableDNS      = "dns"
	TableVolumes  = "volumes"
	TableMeta     = "meta"
	TableUsers    = "users"
	TableProjects = "projects"
	TableReleases = "releases"

	TableCoordinators = "coordinators"
	TableAudit        = "audit"
	TableUserTokens   = "user_tokens"
	TableServices     = "services"
	TableBackups      = "backups"
	TableCertificates = "certificates"
	TableExtensions   = "extensions"

	TableRegistryLogins = "registry_logins"
)

// Meta rows hold singletons: the cluster config and the latest index.
type Meta struct {
	Key   string
	Value any
}

const (
	MetaIndex   = "index"
	MetaConfig  = "config"
	MetaKeyring = "keyring"
	MetaAcme    = "acme"
)

func schema() *memdb.DBSchema {
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		TableNodes: {
			Name: TableNodes,
			Indexes: map[string]*memdb.IndexSchema{
				"id":   {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"name": {Name: "name", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
			},
		},
		TableGuests: {
			Name: TableGuests,
			Indexes: map[string]*memdb.IndexSchema{
				"id":   {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"name": {Name: "name", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
				"node": {Name: "node", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "NodeId"}},
				"prev": {Name: "prev", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "PreviousNodeId"}},
			},
		},
		TableTokens: {
			Name: TableTokens,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
			},
		},
		TableRoutes: {
			Name: TableRoutes,
			Indexes: map[string]*memdb.IndexSchema{
				"id":     {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"domain": {Name: "domain", Unique: true, AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "Domain"}},
				"guest":  {Name: "guest", Indexer: &memdb.StringFieldIndex{Field: "GuestId"}},
			},
		},
		TableDNS: {
			Name: TableDNS,
			Indexes: map[string]*memdb.IndexSchema{
				"id":  {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"key": {Name: "key", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Key"}},
				// name: the owner, as DNS compares names (case aside).
				"name": {Name: "name", Indexer: &memdb.StringFieldIndex{Field: "Name", Lowercase: true}},
			},
		},
		TableVolumes: {
			Name: TableVolumes,
			Indexes: map[string]*memdb.IndexSchema{
				"id":    {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"name":  {Name: "name", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
				"node":  {Name: "node", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "NodeId"}},
				"guest": {Name: "guest", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "GuestId"}},
				"prev":  {Name: "prev", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "PreviousNodeId"}},
			},
		},
		TableUsers: {
			Name: TableUsers,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
			},
		},
		TableProjects: {
			Name: TableProjects,
			Indexes: map[string]*memdb.IndexSchema{
				"id":   {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"name": {Name: "name", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
			},
		},
		TableReleases: {
			Name: TableReleases,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"env": {Name: "env", Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
					&memdb.StringFieldIndex{Field: "Project"},
					&memdb.StringFieldIndex{Field: "Env"},
				}}},
			},
		},
		TableCoordinators: {
			Name: TableCoordinators,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
			},
		},
		TableUserTokens: {
			Name: TableUserTokens,
			Indexes: map[string]*memdb.IndexSchema{
				"id":   {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"user": {Name: "user", Indexer: &memdb.StringFieldIndex{Field: "User"}},
			},
		},
		TableAudit: {
			Name: TableAudit,
			Indexes: map[string]*memdb.IndexSchema{
				// An entry's index, then the write's place in its batch.
				"id": {Name: "id", Unique: true, Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
					&memdb.UintFieldIndex{Field: "Index"}, &memdb.UintFieldIndex{Field: "Position"},
				}}},
			},
		},
		TableServices: {
			Name: TableServices,
			Indexes: map[string]*memdb.IndexSchema{
				"id":    {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"name":  {Name: "name", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
				"guest": {Name: "guest", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "GuestId"}},
			},
		},
		TableBackups: {
			Name: TableBackups,
			Indexes: map[string]*memdb.IndexSchema{
				"id":      {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"service": {Name: "service", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "Service"}},
				"volume":  {Name: "volume", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "Volume"}},
				"node":    {Name: "node", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "NodeId"}},
			},
		},
		TableCertificates: {
			Name: TableCertificates,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Domain"}},
			},
		},
		TableExtensions: {
			Name: TableExtensions,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
			},
		},
		TableRegistryLogins: {
			Name: TableRegistryLogins,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Host"}},
			},
		},
		TableMeta: {
			Name: TableMeta,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Key"}},
			},
		},
	}}
}

// InsertAll inserts rows into table, as a snapshot's restore does; the
// first failure is returned, naming the table.
func InsertAll[T any](txn *memdb.Txn, table string, rows []T) error {
	for _, r := range rows {
		if err := txn.Insert(table, r); err != nil {
			return fmt.Errorf("restoring %s: %w", table, err)
		}
	}
	return nil
}
