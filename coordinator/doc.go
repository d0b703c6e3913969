// Package coordinator is the control plane: a member of the Raft group
// that replicates the cluster state, the API that reads and writes it, and
// — while this replica leads — the leader's loops (the scheduler, the node
// liveness checker, the autoscaler, the backup schedules, the certificate
// orderer), which one coordinator/leader Runner starts and stops.
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
//	  leader.Runner: scheduler, liveness,        │
//	  autoscale, backupschedule, certs ◀─────────┘
package coordinator
