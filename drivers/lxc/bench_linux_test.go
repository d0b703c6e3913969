//go:build linux && cgo

package lxc

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkCreateStart measures Create then Start of a busybox guest from a
// warm image cache, per clone mode and confinement (privileged, as
// before guests had user namespaces; unprivileged, the default, each
// guest in an id range of its own; and unprivileged with a root file
// system disk of 1 GiB, what the API gives), and reports both steps
// apart; Destroy is outside the timing. "copy-per-range" is an overlay
// guest where idmapped mounts cannot be had: the first guest of each
// range waits for a copy of the image shifted to it (every guest here is
// the first of its range).
//
//	go test -run '^$' -bench CreateStart -benchtime 20x ./drivers/lxc/
func BenchmarkCreateStart(b *testing.B) {
	type variant struct {
		name         string
		mode         cloneMode
		privileged   bool
		disk         int64
		copyPerRange bool
	}
	for _, v := range []variant{
		{"overlay/privileged", cloneOverlay, true, 0, false},
		{"overlay/unprivileged", cloneOverlay, false, 0, false},
		{"overlay/unprivileged+disk", cloneOverlay, false, 1 << 30, false},
		{"overlay/unprivileged/copy-per-range", cloneOverlay, false, 0, true},
		{"copy/privileged", cloneCopy, true, 0, false},
		{"copy/unprivileged", cloneCopy, false, 0, false},
	} {
		mode := v.mode
		b.Run(v.name, func(b *testing.B) {
			d := newTestDriver(b)
			if mode == cloneOverlay && d.clone != cloneOverlay {
				b.Skip("skipping: overlayfs is not usable under", d.path)
			}
			if mode == cloneOverlay && !v.copyPerRange && !v.privileged && !d.idmapped {
				b.Skip("skipping: no idmapped mounts for overlays here")
			}
			d.clone = mode
			if v.copyPerRange {
				d.idmapped = false
			}
			ctx := b.Context()
			if err := d.ensureImage(ctx, images["busybox"], nil); err != nil {
				b.Fatal(err)
			}
			var create, start time.Duration
			b.ResetTimer()
			for i := range b.N {
				spec := busybox(fmt.Sprintf("bench-%d", i))
				spec.Privileged, spec.DiskBytes = v.privileged, v.disk
				spec.IDRange = uint32(i + 1)
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
