package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/internal/procfs"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// TestShellScale measures many interactive sessions at once on one node
// (test/bench/shell/run runs it; skipped unless CORPUS_BENCH_SHELL is
// set, being a measurement): the time to open CORPUS_BENCH_SHELLS (50)
// sessions on terminals in one LXC guest, each printing a line a second,
// and, against the same figures without them, an exec's round trip
// through the agent and the agent's CPU and memory.
func TestShellScale(t *testing.T) {
	if os.Getenv("CORPUS_BENCH_SHELL") == "" {
		t.Skip("a measurement: set CORPUS_BENCH_SHELL=1 (test/bench/shell/run does)")
	}
	n := 50
	if v, err := strconv.Atoi(os.Getenv("CORPUS_BENCH_SHELLS")); err == nil && v > 0 {
		n = v
	}
	c := newCluster(t)
	a := c.addAgent("n1")
	c.mustCLI("guest", "create", "sh1", "--image", "busybox", "--memory", "256M", "--cpus", "1")
	guests := corpusv1connect.NewGuestServiceClient(streamClient(t, c), "https://"+c.api, connect.WithInterceptors(rpc.Bearer(c.token)))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	execRTT := func() time.Duration {
		var d []time.Duration
		for range 20 {
			start := time.Now()
			s, err := guests.ExecGuest(ctx, connect.NewRequest(&corpusv1.ExecGuestRequest{Name: "sh1", Argv: []string{"true"}}))
			if err != nil {
				t.Fatal(err)
			}
			for s.Receive() {
			}
			s.Close()
			d = append(d, time.Since(start))
		}
		slices.Sort(d)
		return d[len(d)/2]
	}
	agentCPU := func() (cpu time.Duration, rss int64) {
		pid := a.proc.cmd.Process.Pid
		return procfs.CPU(pid), procfs.RSS(pid)
	}
	cpuOver := func(d time.Duration) (float64, int64) {
		c0, _ := agentCPU()
		time.Sleep(d)
		c1, rss := agentCPU()
		return float64(c1-c0) / float64(d), rss
	}

	idleRTT := execRTT()
	idleCPU, idleRSS := cpuOver(10 * time.Second)

	// n sessions on terminals, each printing a line a second.
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var opened []time.Duration
	lines := make([]int, n)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := guests.Shell(ctx)
			defer st.CloseResponse()
			if err := st.Send(&corpusv1.ShellInput{Open: &corpusv1.ExecGuestRequest{Name: "sh1", Argv: []string{"sh", "-c", "while :; do echo tick; sleep 1; done"}},
				Tty: true, Size: &corpusv1.TerminalSize{Rows: 24, Cols: 80}}); err != nil {
				errs <- err
				return
			}
			first := true
			for {
				out, err := st.Receive()
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				if strings.Contains(string(out.Stdout), "tick") {
					mu.Lock()
					if first {
						opened = append(opened, time.Since(start))
						first = false
					}
					lines[i]++
					mu.Unlock()
				}
			}
		}()
	}
	eventually(t, 2*time.Minute, fmt.Sprintf("%d sessions printing", n), func() error {
		select {
		case err := <-errs:
			t.Fatalf("a session failed: %v", err)
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		if len(opened) < n {
			return fmt.Errorf("%d of %d sessions printed", len(opened), n)
		}
		return nil
	})
	allOpen := time.Since(start)
	busyRTT := execRTT()
	busyCPU, busyRSS := cpuOver(10 * time.Second)
	mu.Lock()
	slices.Sort(opened)
	minLines := slices.Min(lines)
	mu.Unlock()
	select {
	case err := <-errs:
		t.Fatalf("a session failed: %v", err)
	default:
	}
	cancel()
	wg.Wait()

	t.Logf("RESULT shell_open_all_ms=%d (%d sessions on terminals until each printed)", allOpen.Milliseconds(), n)
	t.Logf("RESULT shell_open_ms min=%d median=%d max=%d (%d sessions)", opened[0].Milliseconds(), opened[len(opened)/2].Milliseconds(), opened[len(opened)-1].Milliseconds(), n)
	t.Logf("RESULT exec_rtt_idle_ms=%.1f (median of 20, no sessions)", float64(idleRTT.Microseconds())/1000)
	t.Logf("RESULT exec_rtt_busy_ms=%.1f (median of 20, %d sessions open; ratio %.2fx)", float64(busyRTT.Microseconds())/1000, n, float64(busyRTT)/float64(idleRTT))
	t.Logf("RESULT agent_cpu_idle_pct=%.1f (of one core, 10 s, no sessions)", idleCPU*100)
	t.Logf("RESULT agent_cpu_busy_pct=%.1f (of one core, 10 s, %d sessions printing a line a second)", busyCPU*100, n)
	t.Logf("RESULT agent_rss_idle_mb=%.1f", float64(idleRSS)/(1<<20))
	t.Logf("RESULT agent_rss_busy_mb=%.1f (%d sessions)", float64(busyRSS)/(1<<20), n)
	if minLines < 5 {
		t.Errorf("a session printed only %d lines in the measurement", minLines)
	}
}

// streamClient is an HTTP/2 client of the cluster's API for long
// streams (no overall timeout), dialing from the coordinator's namespace.
func streamClient(t *testing.T, c *cluster) *http.Client {
	t.Helper()
	return &http.Client{Transport: tlsTransport(t, c.lab.ctl, c.ca)}
}
