package state

import (
	"github.com/hashicorp/go-memdb"
)

const (
	tableNodes    = "nodes"
	tableGuests   = "guests"
	tableTokens   = "tokens"
	tableRoutes   = "routes"
	tableDNS      = "dns"
	tableVolumes  = "volumes"
	tableMeta     = "meta"
	tableUsers    = "users"
	tableProjects = "projects"
	tableReleases = "releases"

	tableCoordinators = "coordinators"
	tableAudit        = "audit"
	tableUserTokens   = "user_tokens"
)

// meta rows hold singletons: the cluster config and the latest index.
type meta struct {
	Key   string
	Value any
}

const (
	metaIndex  = "index"
	metaConfig = "config"
)

func schema() *memdb.DBSchema {
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tableNodes: {
			Name: tableNodes,
			Indexes: map[string]*memdb.IndexSchema{
				"id":   {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"name": {Name: "name", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
			},
		},
		tableGuests: {
			Name: tableGuests,
			Indexes: map[string]*memdb.IndexSchema{
				"id":   {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"name": {Name: "name", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
				"node": {Name: "node", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "NodeId"}},
				"prev": {Name: "prev", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "PreviousNodeId"}},
			},
		},
		tableTokens: {
			Name: tableTokens,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
			},
		},
		tableRoutes: {
			Name: tableRoutes,
			Indexes: map[string]*memdb.IndexSchema{
				"id":     {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"domain": {Name: "domain", Unique: true, AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "Domain"}},
				"guest":  {Name: "guest", Indexer: &memdb.StringFieldIndex{Field: "GuestId"}},
			},
		},
		tableDNS: {
			Name: tableDNS,
			Indexes: map[string]*memdb.IndexSchema{
				"id":  {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"key": {Name: "key", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Key"}},
				// name: the owner, as DNS compares names (case aside).
				"name": {Name: "name", Indexer: &memdb.StringFieldIndex{Field: "Name", Lowercase: true}},
			},
		},
		tableVolumes: {
			Name: tableVolumes,
			Indexes: map[string]*memdb.IndexSchema{
				"id":    {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"name":  {Name: "name", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
				"node":  {Name: "node", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "NodeId"}},
				"guest": {Name: "guest", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "GuestId"}},
				"prev":  {Name: "prev", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "PreviousNodeId"}},
			},
		},
		tableUsers: {
			Name: tableUsers,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
			},
		},
		tableProjects: {
			Name: tableProjects,
			Indexes: map[string]*memdb.IndexSchema{
				"id":   {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"name": {Name: "name", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
			},
		},
		tableReleases: {
			Name: tableReleases,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"env": {Name: "env", Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
					&memdb.StringFieldIndex{Field: "Project"},
					&memdb.StringFieldIndex{Field: "Env"},
				}}},
			},
		},
		tableCoordinators: {
			Name: tableCoordinators,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
			},
		},
		tableUserTokens: {
			Name: tableUserTokens,
			Indexes: map[string]*memdb.IndexSchema{
				"id":   {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"user": {Name: "user", Indexer: &memdb.StringFieldIndex{Field: "User"}},
			},
		},
		tableAudit: {
			Name: tableAudit,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.UintFieldIndex{Field: "Index"}},
			},
		},
		tableServices: {
			Name: tableServices,
			Indexes: map[string]*memdb.IndexSchema{
				"id":    {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"name":  {Name: "name", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
				"guest": {Name: "guest", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "GuestId"}},
			},
		},
		tableBackups: {
			Name: tableBackups,
			Indexes: map[string]*memdb.IndexSchema{
				"id":      {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Id"}},
				"service": {Name: "service", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "Service"}},
				"volume":  {Name: "volume", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "Volume"}},
				"node":    {Name: "node", AllowMissing: true, Indexer: &memdb.StringFieldIndex{Field: "NodeId"}},
			},
		},
		tableCertificates: {
			Name: tableCertificates,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Domain"}},
			},
		},
		tableExtensions: {
			Name: tableExtensions,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
			},
		},
		tableMeta: {
			Name: tableMeta,
			Indexes: map[string]*memdb.IndexSchema{
				"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Key"}},
			},
		},
	}}
}
