package coordinator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	mdns "github.com/miekg/dns"

	"corpus/coordinator"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestSnapshotScale measures a snapshot of a cluster of 1,000 guests and
// 100 projects (10 nodes): its save time and size, and the time a restore
// takes from the replica's start to a serving group (the API answering
// with the cluster's id, DNS answering for a guest). test/bench/snapshot
// runs it (CORPUS_BENCH_SNAPSHOT=1) and records the figures it logs.
func TestSnapshotScale(t *testing.T) {
	if os.Getenv("CORPUS_BENCH_SNAPSHOT") == "" {
		t.Skip("a measurement: set CORPUS_BENCH_SNAPSHOT=1 (test/bench/snapshot/run)")
	}
	ctx := context.Background()
	s := start(t, t.TempDir())
	for i := range 10 {
		s.enroll(fmt.Sprintf("n%d", i)).report(t)
	}
	ops := s.ops()
	// The guests are placed before the projects are made: the nodes'
	// disk fits the guests exactly, and a project's guest placed before
	// the last of them left that one pending.
	run := func(n int, f func(i int) error) {
		var wg sync.WaitGroup
		errs := make(chan error, n)
		work := make(chan int)
		for range 8 {
			wg.Go(func() {
				for i := range work {
					if err := f(i); err != nil {
						errs <- err
					}
				}
			})
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	run(1000, func(i int) error {
		_, err := ops.guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: fmt.Sprintf("g%d", i),
			Spec: &corpusv1.GuestSpec{Image: "busybox", Resources: &corpusv1.Resources{CpuMillis: 10, MemoryBytes: 16 << 20}}}))
		return err
	})
	// The scheduler places the guests (and gives them their addresses)
	// after they are made: the snapshot is of placed guests, each in its
	// DNS. (The projects' guests, made after, find no disk left and
	// stay pending.)
	s.waitFor("every guest g* placed", func(v *state.Snap) bool {
		for _, g := range v.Guests() {
			if g.Address == "" && strings.HasPrefix(g.Name, "g") {
				return false
			}
		}
		return true
	})
	run(100, func(i int) error {
		_, err := ops.project.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{Name: fmt.Sprintf("p%d", i), Env: "dev"}))
		return err
	})
	start := time.Now()
	path, h := saveSnapshot(t, s, snapSecret)
	saved := time.Since(start)
	info, _ := os.Stat(path)
	t.Logf("FIGURE save_ms=%d size_bytes=%d guests=%d projects=%d", saved.Milliseconds(), info.Size(), h.Counts["guests"], h.Counts["projects"])

	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte(snapSecret), 0o600)
	start = time.Now()
	r := launch(t, t.TempDir(), func(c *coordinator.Config) { c.RestoreFile, c.RestoreKeyFile = path, keyFile })
	c := r.clients(s.OpsToken())
	for {
		st, err := c.cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{}))
		if err == nil && st.Msg.ClusterId == h.ClusterId && st.Msg.Leader != "" {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("restored group not answering after a minute: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	api := time.Since(start)
	m := new(mdns.Msg)
	m.SetQuestion("g999.guest.corpus.test.", mdns.TypeA)
	for {
		res, _, err := (&mdns.Client{Timeout: time.Second}).Exchange(m, r.DNSAddr())
		if err == nil && len(res.Answer) > 0 {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("restored group's DNS not answering for g999 after a minute: %v %v", res, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("FIGURE restore_api_ms=%d restore_dns_ms=%d", api.Milliseconds(), time.Since(start).Milliseconds())
}
