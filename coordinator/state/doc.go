// Package state is the coordinator's replicated state: a go-memdb database
// of nodes, guests and join tokens, changed only by applying Raft log
// commands (FSM) and read through snapshots-in-time (read transactions).
//
// Objects handed out by the store are shared and must not be modified;
// callers clone them (proto.Clone) before changing anything.
//
// Blocking queries: every read can collect memdb watch channels in a
// memdb.WatchSet and wait on it, so watchers wake on change instead of
// polling. A restore from snapshot abandons the old database and wakes
// every watcher through AbandonCh.
package state
