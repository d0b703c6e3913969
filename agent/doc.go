// Package agent is the daemon on each node. It enrolls the host once, holds
// one watch stream to the coordinator for the desired state of the guests
// placed on its node, and runs a level-based reconcile loop that makes the
// host match: each guest has a worker (agent/guests) that compares desired
// with what the driver observes and acts on the difference. Observed
// states are reported
// back. Cut off from the coordinator, the agent keeps its guests as they
// were last told (the desired state is cached in a local bbolt database).
//
// Its subsystems are packages of their own, wired in here: agent/deploy
// (the release pipeline behind git pushes), agent/volumes, agent/network
// (bridge, NAT, layer-2 filter, proxy and routes), agent/logs,
// agent/shell, agent/sshd (the git and shell endpoint), agent/runtime
// (the guests' process supervisors), agent/instances, agent/services,
// agent/load, agent/certs and agent/cache. They never import this package: each asks
// what it needs of the node through a small interface of its own (host
// answers them all) and serves its procedures of the agent's API, which
// admits only the cluster's coordinators (callerCheck). New takes the
// drivers, volume backend and network it runs on (Parts); the daemon
// builds the real ones.
package agent
