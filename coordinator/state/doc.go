// Package state is the coordinator's state machine: it applies Raft log
// commands (FSM) to the replicated database of package statedb, every
// replica alike, and writes and restores its snapshots. Store and Snap,
// the database and its read views, are named here too for the packages
// that read the state.
package state
