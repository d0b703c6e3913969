//go:build linux

package libvirt

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"corpus/drivers"
	"corpus/drivers/libvirt/libvirttest"
	"corpus/internal/testrun"
)

// TestVMStartTimes measures, under real QEMU, how long the driver takes
// from Create to a running VM and to a VM whose guest agent runs a
// command, against `virsh start` by hand of the same domain (defined by
// the driver on a fresh overlay) followed by guest-ping polling, each
// poll a virsh process. It is a measurement, run by test/bench/libvirt/run
// (make bench) with CORPUS_BENCH_VM=1; RUNS sets the samples (default 3).
// The image is built first when the cache is cold, outside the timings.
func TestVMStartTimes(t *testing.T) {
	if os.Getenv("CORPUS_BENCH_VM") == "" {
		t.Skip("a measurement: run test/bench/libvirt/run (CORPUS_BENCH_VM=1)")
	}
	libvirttest.Ensure(t)
	runs := 3
	if n, err := strconv.Atoi(os.Getenv("RUNS")); err == nil && n > 0 {
		runs = n
	}
	imageDir := os.Getenv("CORPUS_LIBVIRT_IMAGES")
	if imageDir == "" {
		imageDir = "/var/cache/corpus-test/libvirt-images"
	}
	dir, err := os.MkdirTemp("/var/tmp", "corpus-vmbench")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	d, err := New(Config{URI: DefaultURI, Dir: dir, ImageDir: imageDir, Instance: "bench-" + strconv.Itoa(os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx := context.Background()
	if _, err := d.ensureImage(ctx, images["debian/bookworm"], func(m string) { t.Log(m) }); err != nil {
		t.Fatal(err)
	}

	execReady := func(name string) error {
		var out bytes.Buffer
		code, err := d.Exec(ctx, name, drivers.ExecRequest{Argv: []string{"echo", "ready"}, Stdout: &out})
		if err == nil && (code != 0 || strings.TrimSpace(out.String()) != "ready") {
			err = fmt.Errorf("exec = %d %q", code, out.String())
		}
		return err
	}
	waitFor := func(f func() error) error {
		deadline := time.Now().Add(testrun.D(5 * time.Minute))
		for {
			err := f()
			if err == nil || time.Now().After(deadline) {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	var drvRun, drvExec, handRun, handExec []time.Duration
	for i := range runs {
		name := fmt.Sprintf("vmbench%d", i)
		t.Cleanup(func() { d.Destroy(context.Background(), name) })
		spec := drivers.GuestSpec{ID: name, Name: name, Image: "debian/bookworm", MemoryBytes: 512 << 20, CPUMillis: 1000}

		t0 := time.Now()
		if err := d.Create(ctx, spec, nil); err != nil {
			t.Fatal(err)
		}
		if err := d.Start(ctx, name); err != nil {
			t.Fatal(err)
		}
		drvRun = append(drvRun, time.Since(t0))
		if err := waitFor(func() error { return execReady(name) }); err != nil {
			t.Fatalf("%s never exec-ready: %v", name, err)
		}
		drvExec = append(drvExec, time.Since(t0))

		if err := d.Destroy(ctx, name); err != nil {
			t.Fatal(err)
		}

		// The same domain on a fresh overlay (so both are first boots
		// of a clean disk), defined by the driver, started by hand.
		hand := name + "h"
		t.Cleanup(func() { d.Destroy(context.Background(), hand) })
		spec.ID, spec.Name = hand, hand
		if err := d.Create(ctx, spec, nil); err != nil {
			t.Fatal(err)
		}
		t0 = time.Now()
		if out, err := exec.Command("virsh", "-c", DefaultURI, "start", hand).CombinedOutput(); err != nil {
			t.Fatalf("virsh start: %v: %s", err, out)
		}
		handRun = append(handRun, time.Since(t0))
		ping := func() error {
			out, err := exec.Command("virsh", "-c", DefaultURI, "qemu-agent-command", hand, `{"execute":"guest-ping"}`).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}
		if err := waitFor(ping); err != nil {
			t.Fatalf("%s never answered guest-ping: %v", hand, err)
		}
		handExec = append(handExec, time.Since(t0))
		if err := d.Destroy(ctx, hand); err != nil {
			t.Fatal(err)
		}
	}
	med := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	report := fmt.Sprintf("VM start under %s, %d runs, medians (all samples in the test log):\n"+
		"  driver Create+Start to running     %8s\n"+
		"  virsh start to running (by hand)   %8s   ratio %.2f\n"+
		"  driver Create to exec-ready        %8s\n"+
		"  virsh start to guest-ping answers  %8s   ratio %.2f\n",
		accel(), runs,
		med(drvRun).Round(time.Millisecond), med(handRun).Round(time.Millisecond), float64(med(drvRun))/float64(med(handRun)),
		med(drvExec).Round(time.Millisecond), med(handExec).Round(time.Millisecond), float64(med(drvExec))/float64(med(handExec)))
	t.Logf("samples: driver running %v, exec %v; virsh running %v, guest-ping %v", drvRun, drvExec, handRun, handExec)
	fmt.Print(report)
	if out := os.Getenv("BENCH_OUT"); out != "" {
		os.WriteFile(filepath.Clean(out), []byte(report), 0o644)
	}
}
