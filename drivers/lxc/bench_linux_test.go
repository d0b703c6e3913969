//go:build linux && cgo

package lxc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"corpus/drivers"
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

// BenchmarkExec measures Exec of a command that does nothing in a
// running busybox guest: the wall time of each, and the CPU time each
// costs the guest (its cgroup's), where the attached process tears down
// the copy of this process's memory it began with. heap-MiB is how much
// memory this process holds meanwhile (as an agent in a deploy does):
// a guest held to a slice of a CPU waits out its quota once execs use
// it up.
//
//	go test -run '^$' -bench Exec -benchtime 50x ./drivers/lxc/
func BenchmarkExec(b *testing.B) {
	d := newTestDriver(b)
	ctx := b.Context()
	if err := d.ensureImage(ctx, images["busybox"], nil); err != nil {
		b.Fatal(err)
	}
	spec := busybox("bench-exec")
	spec.IDRange = 1
	if err := d.Create(ctx, spec, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Destroy(context.Background(), spec.Name) })
	if err := d.Start(ctx, spec.Name); err != nil {
		b.Fatal(err)
	}
	c, _, err := d.openGuest(spec.Name)
	if err != nil {
		b.Fatal(err)
	}
	usage := guestCPU(b, c.InitPid())
	c.Release()
	for _, mib := range []int{0, 20} {
		b.Run(fmt.Sprintf("heap-MiB=%d", mib), func(b *testing.B) {
			heap := make([]byte, mib<<20)
			for i := range heap {
				heap[i] = 1
			}
			before := usage()
			b.ResetTimer()
			for range b.N {
				if code, err := d.Exec(ctx, spec.Name, drivers.ExecRequest{Argv: []string{"true"}}); err != nil || code != 0 {
					b.Fatalf("exec: %d, %v", code, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(usage()-before)/float64(b.N)/1e3, "guest-cpu-us/op")
			runtime.KeepAlive(heap)
		})
	}
}

// guestCPU returns a reader of the CPU time (ns) the cgroup of the
// guest whose init is pid has used: its payload cgroup, which holds
// what is attached to it too (cgroup v1's cpuacct or v2's cpu.stat).
func guestCPU(b *testing.B, pid int) func() int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(raw)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || (f[0] != "0" && !containsField(f[1], "cpuacct")) {
			continue
		}
		// Up to the payload cgroup: init may sit in a leaf below it.
		cg := f[2]
		if i := strings.Index(cg, "/lxc.payload."); i >= 0 {
			if j := strings.IndexByte(cg[i+1:], '/'); j >= 0 {
				cg = cg[:i+1+j]
			}
		}
		path := filepath.Join(cgroupRoot, "cpuacct", cg, "cpuacct.usage")
		if f[0] == "0" {
			path = filepath.Join(cgroupRoot, cg, "cpu.stat")
		}
		return func() int64 {
			raw, err := os.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			s := strings.TrimSpace(string(raw))
			if v, ok := strings.CutPrefix(s, "usage_usec "); ok {
				s, _, _ = strings.Cut(v, "\n")
				n, _ := strconv.ParseInt(s, 10, 64)
				return n * 1000
			}
			n, _ := strconv.ParseInt(s, 10, 64)
			return n
		}
	}
	b.Fatalf("guest init %d: no CPU accounting cgroup in %q", pid, raw)
	return nil
}
