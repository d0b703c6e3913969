package scheduler_test

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"corpus/coordinator/scheduler"
	"corpus/coordinator/state"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// BenchmarkPlace measures one scheduling pass over 1000 pending guests on
// 100 nodes: planning on a snapshot, then committing, either as the one
// PlaceGuests entry the scheduler writes or as one entry per guest (what
// it wrote before). "fsm" applies the entries to the state machine
// directly (encode, decode, check, apply); "raft" commits them through a
// one-member Raft group with its log in bbolt on disk, as a coordinator
// does, where every entry the scheduler waits for costs a log write.
//
//	go test -run '^$' -bench Place -benchtime 3x ./coordinator/scheduler
func BenchmarkPlace(b *testing.B) {
	const nodes, guests = 100, 1000
	for _, via := range []string{"fsm", "raft"} {
		for _, mode := range []string{"batched", "entry-per-guest"} {
			b.Run(fmt.Sprintf("%s/%s/%d-guests/%d-nodes", via, mode, guests, nodes), func(b *testing.B) {
				placed := 0
				for b.Loop() {
					b.StopTimer()
					store, apply := newFSMLog(b)
					if via == "raft" {
						store, apply = newRaftLog(b)
					}
					populate(b, apply, nodes, guests)
					b.StartTimer()
					plan := scheduler.Plan(store.Read())
					if mode == "batched" {
						mustApply(b, apply, &corpusv1.Command{Cmd: &corpusv1.Command_PlaceGuests{PlaceGuests: &corpusv1.PlaceGuests{Placements: plan}}})
					} else {
						for _, p := range plan {
							mustApply(b, apply, &corpusv1.Command{Cmd: &corpusv1.Command_PlaceGuest{PlaceGuest: p}})
						}
					}
					b.StopTimer()
					if left := scheduler.Plan(store.Read()); len(left) != 0 || len(plan) != guests {
						b.Fatalf("planned %d, %d left after the commit; want %d, 0", len(plan), len(left), guests)
					}
					placed += len(plan)
					b.StartTimer()
				}
				b.ReportMetric(float64(placed)/b.Elapsed().Seconds(), "placements/s")
			})
		}
	}
}

// applier commits commands in order and waits for all of them; it
// returns the first business error.
type applier func(cmds ...*corpusv1.Command) error

func mustApply(b *testing.B, apply applier, cmds ...*corpusv1.Command) {
	b.Helper()
	if err := apply(cmds...); err != nil {
		b.Fatalf("applying %d commands: %v", len(cmds), err)
	}
}

// populate enrolls nodes ready nodes of 64 GiB and creates guests small
// pending guests.
func populate(b *testing.B, apply applier, nodes, guests int) {
	var cmds []*corpusv1.Command
	for i := range nodes {
		name := fmt.Sprintf("n%03d", i)
		cmds = append(cmds, enrollCmds(name)...)
		cmds = append(cmds, reportCmd(name, 64, "v1"))
	}
	for i := range guests {
		g := guest()
		g.Id, g.Name, g.DesiredState = fmt.Sprintf("g%04d-id", i), fmt.Sprintf("g%04d", i), state.DesiredRunning
		g.Spec.Resources = &corpusv1.Resources{MemoryBytes: gib / 4, CpuMillis: 100, DiskBytes: gib}
		cmds = append(cmds, &corpusv1.Command{Cmd: &corpusv1.Command_CreateGuest{CreateGuest: &corpusv1.CreateGuest{Guest: g}}})
	}
	mustApply(b, apply, cmds...)
}

// newFSMLog is the state machine fed directly, as the tests' replica is.
func newFSMLog(b *testing.B) (*state.Store, applier) {
	r := newReplica(b)
	return r.Store, func(cmds ...*corpusv1.Command) error {
		for _, c := range cmds {
			if _, err := r.apply(c); err != nil {
				return err
			}
		}
		return nil
	}
}

// newRaftLog is a one-member Raft group over the state machine, its log
// and stable store in bbolt under a temporary folder. Commands given
// together are proposed together (Raft writes them in few batches), and
// each call waits until all are applied.
func newRaftLog(b *testing.B) (*state.Store, applier) {
	store := state.NewStore()
	fsm := state.NewFSM(store, slog.New(slog.DiscardHandler))
	logs, err := raftboltdb.NewBoltStore(filepath.Join(b.TempDir(), "raft.db"))
	if err != nil {
		b.Fatal(err)
	}
	addr, transport := raft.NewInmemTransport("")
	cfg := raft.DefaultConfig()
	cfg.LocalID = "bench"
	cfg.Logger = hclog.NewNullLogger()
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	r, err := raft.NewRaft(cfg, fsm, logs, logs, raft.NewInmemSnapshotStore(), transport)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		r.Shutdown().Error()
		logs.Close()
	})
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: cfg.LocalID, Address: addr}}}).Error(); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(testrun.D(10 * time.Second)); r.State() != raft.Leader; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the benchmark's Raft member did not become leader")
		}
	}
	apply := func(cmds ...*corpusv1.Command) error {
		futures := make([]raft.ApplyFuture, len(cmds))
		for i, c := range cmds {
			data, err := state.Encode(c, time.Now())
			if err != nil {
				return err
			}
			futures[i] = r.Apply(data, time.Minute)
		}
		for _, f := range futures {
			if err := f.Error(); err != nil {
				return err
			}
			if res, ok := f.Response().(*state.Result); ok && res.Err != nil {
				return res.Err
			}
		}
		return nil
	}
	// The cluster config, as the leader writes it first.
	if err := apply(&corpusv1.Command{Cmd: &corpusv1.Command_BootstrapCluster{BootstrapCluster: &corpusv1.BootstrapCluster{
		Config: &corpusv1.ClusterConfig{ClusterId: "bench"},
	}}}); err != nil {
		b.Fatal(err)
	}
	return store, apply
}
