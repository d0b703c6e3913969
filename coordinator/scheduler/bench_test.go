package scheduler_test

import (
	"fmt"
	"testing"

	"corpus/coordinator/scheduler"
	corpusv1 "corpus/proto/corpus/v1"
)

// BenchmarkPlace measures one scheduling pass over 1000 pending guests on
// 100 nodes: planning on a snapshot, then committing through the real
// state machine (encode, decode, check, apply), either as the one
// PlaceGuests entry the scheduler writes or as one entry per guest. Raft
// adds a replicated, fsynced log write per entry on top, which is what
// batching saves most; run with
//
//	go test -run '^$' -bench Place -benchtime 5x ./coordinator/scheduler
func BenchmarkPlace(b *testing.B) {
	const nodes, guests = 100, 1000
	for _, mode := range []string{"batched", "entry-per-guest"} {
		b.Run(fmt.Sprintf("%s/%d-guests/%d-nodes", mode, guests, nodes), func(b *testing.B) {
			placed := 0
			for b.Loop() {
				b.StopTimer()
				r := newReplica(b)
				for i := range nodes {
					r.enroll(fmt.Sprintf("n%03d", i), 64, true)
				}
				for i := range guests {
					r.createSmallGuest(fmt.Sprintf("g%04d", i))
				}
				b.StartTimer()
				plan := scheduler.Plan(r.store.Read())
				if mode == "batched" {
					r.must(&corpusv1.Command{Cmd: &corpusv1.Command_PlaceGuests{PlaceGuests: &corpusv1.PlaceGuests{Placements: plan}}})
				} else {
					for _, p := range plan {
						r.must(&corpusv1.Command{Cmd: &corpusv1.Command_PlaceGuest{PlaceGuest: p}})
					}
				}
				b.StopTimer()
				if left := scheduler.Plan(r.store.Read()); len(left) != 0 || len(plan) != guests {
					b.Fatalf("planned %d, %d left after the commit; want %d, 0", len(plan), len(left), guests)
				}
				placed += len(plan)
				b.StartTimer()
			}
			b.ReportMetric(float64(placed)/b.Elapsed().Seconds(), "placements/s")
		})
	}
}
