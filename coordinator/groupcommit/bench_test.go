package groupcommit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkPropose: writes committed per second by 1, 16 and 64
// concurrent proposers on one real replica (bbolt log, fsync), one entry
// a write (a group at v0.1) against batch entries (v0.2). Figures:
// writes/s, and entries/op (Raft entries a write cost).
//
//	go test -run '^$' -bench Propose -benchtime 2000x ./coordinator/groupcommit/
func BenchmarkPropose(b *testing.B) {
	for _, mode := range []struct{ name, version string }{{"single", "v0.1"}, {"batch", "v0.2"}} {
		for _, clients := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/clients=%d", mode.name, clients), func(b *testing.B) {
				g := newGroup(b, mode.version, 0, 0)
				from, _ := g.logs.LastIndex()
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for c := range clients {
					wg.Go(func() {
						for {
							n := next.Add(1)
							if n > int64(b.N) {
								return
							}
							name := fmt.Sprintf("c%d-w%d", c, n)
							if res, err := g.propose(context.Background(), record(name)); err != nil || res.Err != nil {
								b.Errorf("Propose(%s) = %v, %v", name, res, err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
				b.ReportMetric(float64(len(g.entries(from)))/float64(b.N), "entries/op")
			})
		}
	}
}
