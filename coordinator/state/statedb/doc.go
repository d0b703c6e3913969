// Package statedb is the coordinator's replicated state as a database: a
// go-memdb database of nodes, guests, projects, services and the rest
// (schema.go), read through snapshots-in-time (Snap, a read transaction)
// with the queries the API, the scheduler and the leader loops ask.
//
// Only the state machine (package state) writes it, by applying Raft log
// commands: Store's write side (Write, Replace, SetApplied and the
// cluster's time) is for it alone.
//
// Objects handed out by the store are shared and must not be modified;
// callers clone them (proto.Clone) before changing anything.
//
// Blocking queries: every read can collect memdb watch channels in a
// memdb.WatchSet and wait on it, so watchers wake on change instead of
// polling. A restore from snapshot abandons the old database and wakes
// every watcher through AbandonCh.
package statedb
