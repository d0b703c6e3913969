package scheduler_test

import (
	"fmt"
	"testing"

	"corpus/coordinator/scheduler"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// BenchmarkPassAtScale measures one pass of the leader's scheduler (plan
// only, up to the 1,000 entries a pass commits) where test/sim's 5,000
// nodes run 100,000 guests and a tenth of the nodes just died: the guests
// of the dead nodes (bin-packed, so most of them) wait for a new node.
// Nodes of 4 GiB, guests of 32 MiB, as test/sim's. by-shape is the
// scheduler, by-scan what it did before (every node ranked per guest).
//
//	go test -run '^$' -bench PassAtScale -benchtime 5x ./coordinator/scheduler
func BenchmarkPassAtScale(b *testing.B) {
	for _, size := range []struct{ nodes, guests int }{{1000, 10000}, {5000, 100000}} {
		b.Run(fmt.Sprintf("%d-nodes/%d-guests", size.nodes, size.guests), func(b *testing.B) {
			// Room for 65,536 nodes' /24s, as test/sim/run's replicas.
			r := newReplicaOf(b, &corpusv1.ClusterConfig{ClusterId: "c1", GuestNetwork: "10.0.0.0/8", NodeSubnetBits: 24})
			var cmds []*corpusv1.Command
			for i := range size.nodes {
				name := fmt.Sprintf("n%05d", i)
				cmds = append(cmds, enrollCmds(name)...)
				cmds = append(cmds, reportCmd(name, 4, "v1"))
			}
			r.must(cmds...)
			cmds = cmds[:0]
			perNode := int(4 * gib / (32 << 20))
			var place []*corpusv1.PlaceGuest
			for i := range size.guests {
				g := guest()
				g.Id, g.Name, g.DesiredState = fmt.Sprintf("g%06d-id", i), fmt.Sprintf("g%06d", i), state.DesiredRunning
				g.Spec.Resources = &corpusv1.Resources{MemoryBytes: 32 << 20, CpuMillis: 10}
				cmds = append(cmds, &corpusv1.Command{Cmd: &corpusv1.Command_CreateGuest{CreateGuest: &corpusv1.CreateGuest{Guest: g}}})
				place = append(place, &corpusv1.PlaceGuest{GuestId: g.Id, NodeId: fmt.Sprintf("n%05d-id", i/perNode), ModifyIndex: r.Index() + uint64(len(cmds))})
			}
			r.must(cmds...)
			for len(place) > 0 {
				n := min(len(place), 1000)
				r.must(&corpusv1.Command{Cmd: &corpusv1.Command_PlaceGuests{PlaceGuests: &corpusv1.PlaceGuests{Placements: place[:n]}}})
				place = place[n:]
			}
			if placed := len(scheduler.Plan(r.Store.Read())); placed != 0 {
				b.Fatalf("%d guests still to place after the setup", placed)
			}
			for i := range size.nodes / 10 {
				r.nodeStatus(fmt.Sprintf("n%05d", i), state.NodeDown)
			}
			view := r.Store.Read()
			for _, mode := range []string{"by-shape", "by-scan"} {
				b.Run(mode, func(b *testing.B) {
					defer scheduler.ByShape(mode == "by-shape")()
					planned := 0
					for b.Loop() {
						planned += len(scheduler.PlanUpTo(view, 1000))
					}
					b.ReportMetric(float64(planned)/b.Elapsed().Seconds(), "placements/s")
				})
			}
		})
	}
}
