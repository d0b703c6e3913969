//go:build linux && cgo

package lxc

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkCreateStart measures Create then Start of a busybox guest from a
// warm image cache, once per clone mode, and reports both steps apart;
// Destroy is outside the timing.
//
//	go test -run '^$' -bench CreateStart -benchtime 20x ./drivers/lxc/
func BenchmarkCreateStart(b *testing.B) {
	for _, mode := range []cloneMode{cloneOverlay, cloneCopy} {
		b.Run(mode.String(), func(b *testing.B) {
			d := newTestDriver(b)
			if mode == cloneOverlay && d.clone != cloneOverlay {
				b.Skip("skipping: overlayfs is not usable under", d.path)
			}
			d.clone = mode
			ctx := b.Context()
			if err := d.ensureImage(ctx, images["busybox"], nil); err != nil {
				b.Fatal(err)
			}
			var create, start time.Duration
			b.ResetTimer()
			for i := range b.N {
				spec := busybox(fmt.Sprintf("bench-%d", i))
				t0 := time.Now()
				if err := d.Create(ctx, spec, nil); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := d.Start(ctx, spec.Name); err != nil {
					b.Fatal(err)
				}
				create += t1.Sub(t0)
				start += time.Since(t1)
				b.StopTimer()
				if err := d.Destroy(ctx, spec.Name); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(create.Milliseconds())/float64(b.N), "create-ms/op")
			b.ReportMetric(float64(start.Milliseconds())/float64(b.N), "start-ms/op")
		})
	}
}
