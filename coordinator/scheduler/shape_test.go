package scheduler_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/scheduler"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestPlaceByShapeAsScan: placing by shape decides as the scan over
// every node does, placement for placement and reason for reason, on
// random clusters: nodes of a few sizes, some down or draining, some
// holding guests already; guests of a few sizes, some too big for any
// node, some with ports (scanned), some in a project (scanned), some
// privileged (no id range); nodes with few id ranges or none.
func TestPlaceByShapeAsScan(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		r := newReplicaOf(t, &corpusv1.ClusterConfig{ClusterId: "c1", GuestNetwork: "10.0.0.0/8", NodeSubnetBits: 24})
		nodes := 5 + rng.IntN(60)
		for i := range nodes {
			name := fmt.Sprintf("n%02d", i)
			r.must(enrollCmds(name)...)
			report := reportCmd(name, []int64{1, 2, 4}[rng.IntN(3)], "v1")
			report.GetUpdateNode().Drivers[0].IdRanges = []uint32{0, 1, 2, 3, 100}[rng.IntN(5)]
			r.must(report)
			switch rng.IntN(10) {
			case 0:
				r.nodeStatus(name, state.NodeDown)
			case 1:
				r.nodeMode(name, state.ModeDrain)
			}
		}
		guest := func(name string) {
			r.addGuest(name, func(g *corpusv1.Guest) {
				g.Spec.Resources = &corpusv1.Resources{
					MemoryBytes: []int64{128 << 20, 256 << 20, 512 << 20, 3 * gib, 8 * gib}[rng.IntN(5)],
					CpuMillis:   []int64{10, 100, 500}[rng.IntN(3)],
					DiskBytes:   []int64{0, gib}[rng.IntN(2)],
				}
				g.Spec.Privileged = rng.IntN(6) == 0
				if rng.IntN(8) == 0 {
					g.Spec.Ports = []*corpusv1.Port{{HostPort: int32(8000 + rng.IntN(3)), GuestPort: 80, Protocol: "tcp"}}
				}
			})
		}
		// Some guests placed before the pass, as the scheduler placed them.
		for i := range rng.IntN(3 * nodes) {
			guest(fmt.Sprintf("old%03d", i))
		}
		if plan := scheduler.Plan(r.Store.Read()); len(plan) > 0 {
			r.must(&corpusv1.Command{Cmd: &corpusv1.Command_PlaceGuests{PlaceGuests: &corpusv1.PlaceGuests{Placements: plan}}})
		}
		for i := range rng.IntN(4 * nodes) {
			guest(fmt.Sprintf("new%03d", i))
		}
		view := r.Store.Read()
		restore := scheduler.ByShape(false)
		scan := scheduler.Plan(view)
		restore()
		shaped := scheduler.Plan(view)
		if len(scan) != len(shaped) {
			t.Fatalf("seed %d: %d entries by shape, %d by scan", seed, len(shaped), len(scan))
		}
		for i := range scan {
			if !proto.Equal(scan[i], shaped[i]) {
				t.Fatalf("seed %d, entry %d: by shape %v, by scan %v", seed, i, shaped[i], scan[i])
			}
		}
	}
}
