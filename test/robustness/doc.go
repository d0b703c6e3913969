// Package robustness runs the coordinator group through faults while
// clients write and read through the public API, and checks what they
// saw: the histories must be linearizable (porcupine) and no
// acknowledged write may be lost.
//
// Each replica runs in its own network namespace; the replicas reach
// each other through a switch namespace that routes between their links,
// so a partition is an iptables rule there, as a failed link would be:
// full partitions (the leader alone, a follower alone), a bridge (one
// replica sees both sides that cannot see each other) and one-way loss.
// Besides the network: kill -9 and restart, SIGSTOP and SIGCONT, and a
// replica's data folder full (each data folder is a small loop-mounted
// file system), and a replica's wall clock stepped (CORPUS_FAILPOINT_CLOCK,
// package clock). The workload adds DNS records and guests, creates and
// deletes other guests, and writes an environment's config keys; a node
// enrolled with a join token and a CSR (no agent behind it: the
// workload speaks for it with its certificate) reports its guest every
// 100 ms and records deploys (BeginRelease, FinishRelease) one after
// another, as its agent would. Clients read all of it back
// (test/linearizable's model); release numbers must follow the order
// the deploys began in, and the node is never marked down. A run is a
// seeded random schedule of such faults; its seed replays it
// (CORPUS_ROBUSTNESS_SEED). `make robustness RUNS=50`
// runs many and writes results/latest.md.
//
// It needs root (namespaces, iptables, loop mounts) and skips elsewhere.
package robustness
