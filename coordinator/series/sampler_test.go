package series

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"corpus/coordinator/state"
	"corpus/coordinator/state/statetest"
	corpusv1 "corpus/proto/corpus/v1"
)

// fakeLoads answers for a node's agent (the coordinator's and the
// end-to-end tests sample real ones): its proxy served ten more
// requests to app.example.test at each reading.
type fakeLoads struct {
	mu    sync.Mutex
	calls int
}

func (f *fakeLoads) Load(context.Context, *corpusv1.Node) (*corpusv1.LoadResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return &corpusv1.LoadResponse{Requests: map[string]uint64{"app.example.test": uint64(10 * f.calls)}}, nil
}

func (f *fakeLoads) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// TestSampler: the nodes' allocation is sampled every interval; the
// proxies only while someone reads the series, and their counters become
// per-second rates from the second reading on.
func TestSampler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := statetest.Store(t, &corpusv1.Snapshot{
			Nodes: []*corpusv1.Node{{Id: "n1", Name: "node1", Status: state.NodeReady, AgentAddress: "127.0.0.1:1",
				Capacity: &corpusv1.Resources{CpuMillis: 2000, MemoryBytes: 1 << 30}}},
			Guests: []*corpusv1.Guest{{Id: "g1", Name: "web", NodeId: "n1",
				Spec: &corpusv1.GuestSpec{Resources: &corpusv1.Resources{CpuMillis: 500, MemoryBytes: 256 << 20}}}},
			Routes: []*corpusv1.Route{{Id: "r1", Kind: "http", Domain: "app.example.test", GuestId: "g1", GuestPort: 8080}},
		})
		loads := &fakeLoads{}
		every := 15 * time.Second
		sm := NewSampler(SamplerConfig{State: store, Loads: loads, Interval: every, Logger: slog.New(slog.DiscardHandler)})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			sm.Run(ctx)
		}()
		pass := func() {
			time.Sleep(every)
			synctest.Wait()
		}
		value := func(name string) (float64, int) {
			t.Helper()
			got, step := sm.Series(name)
			if step != every {
				t.Errorf("step %s, want %s", step, every)
			}
			if len(got) != 1 {
				t.Fatalf("series %s = %v, want one", name, got)
			}
			p := got[0].Points
			return p[len(p)-1].Value, len(p)
		}

		pass()
		if n := loads.count(); n != 0 {
			t.Errorf("%d proxy readings before anyone read the series, want none", n)
		}
		if v, n := value(nodeCPU); v != 0.25 || n != 1 {
			t.Errorf("%s = %v (%d points), want 0.25 (1 point)", nodeCPU, v, n)
		}
		if v, _ := value(nodeMemory); v != 0.25 {
			t.Errorf("%s = %v, want 0.25", nodeMemory, v)
		}
		pass() // the series were read: the proxies are, from now on
		pass()
		if n := loads.count(); n != 2 {
			t.Errorf("%d proxy readings after two passes, want 2", n)
		}
		if v, _ := value(domainRequests); v != 10/every.Seconds() {
			t.Errorf("%s = %v, want %v", domainRequests, v, 10/every.Seconds())
		}
		// Nobody reads for idle: the proxies are left alone.
		time.Sleep(idle + every)
		synctest.Wait()
		n := loads.count()
		pass()
		if loads.count() != n {
			t.Errorf("proxies read %d times in a pass after idle, want none", loads.count()-n)
		}
		cancel()
		<-done
	})
}
