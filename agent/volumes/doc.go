// Package volumes keeps a node's volumes: it makes each exist and be
// mounted on the host (or handed to a VM as a block device), resizes
// them, moves them between nodes, snapshots and backs them up, and
// records what it observes for the agent's status reports. It has its
// own state and lock; the agent's reconcile loop calls Reconcile each
// pass and its guest workers ask it for mounts and resizes.
package volumes
