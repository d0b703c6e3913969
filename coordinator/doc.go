// Package coordinator is the control plane: a member of the Raft group
// that replicates the cluster state, the API that reads and writes it, and
// — while this replica leads — the scheduler and the node liveness checker.
//
//	      API request
//	           │
//	┌──────────▼──────────┐  reads: local store
//	│ api (auth, handlers)│──────────────────────┐
//	└──────────┬──────────┘                      │
//	     write │ Command                   ┌─────▼─────┐
//	┌──────────▼──────────┐  apply on all  │   state   │
//	│  raft (boltdb log)  │───────────────▶│  (memdb)  │
//	└─────────────────────┘                └─────┬─────┘
//	                      leader only: watch     │
//	              scheduler, liveness ◀──────────┘
package coordinator
