package series

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// DefaultInterval is how often a replica samples the series the
// dashboard plots; DefaultPoints how many it keeps (an hour of them).
const (
	DefaultInterval = 15 * time.Second
	DefaultPoints   = 240
	// idle is how long after the last read of the series the proxies
	// are still sampled; parallel how many at once.
	idle     = 10 * time.Minute
	parallel = 16
)

// Series names (see corpusv1.Series).
const (
	nodeCPU        = "node_cpu_allocated_ratio"
	nodeMemory     = "node_memory_allocated_ratio"
	domainRequests = "domain_requests_per_second"
	domainErrors   = "domain_errors_per_second"
)

// NodeLoads reads a node's load (its proxy's counters) from its agent.
type NodeLoads interface {
	Load(ctx context.Context, node *corpusv1.Node) (*corpusv1.LoadResponse, error)
}

// SamplerConfig is what a Sampler samples from.
type SamplerConfig struct {
	State    *state.Store
	Loads    NodeLoads
	Interval time.Duration // 0: DefaultInterval
	Points   int           // kept per series; 0: DefaultPoints
	Logger   *slog.Logger
}

// Sampler samples, every interval, the allocation of every node (from
// the state) and the request and error rates of every domain (from the
// proxies of ready nodes, a few at a time), and answers the dashboard's
// reads of them. Every replica runs it, so the dashboard plots
// whichever replica it talks to; the proxies are asked only while
// someone reads the series (in the last idle), so a cluster nobody
// watches is not polled.
type Sampler struct {
	cfg   SamplerConfig
	store *Store
	// asked is when the series were last read (unix nanoseconds).
	asked atomic.Int64
}

// NewSampler returns a sampler of cfg's sources; Run samples.
func NewSampler(cfg SamplerConfig) *Sampler {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Points <= 0 {
		cfg.Points = DefaultPoints
	}
	return &Sampler{cfg: cfg, store: New(cfg.Points)}
}

// Series returns the series of the given names (all when none) as the
// API shows them, and the time between their points. Reading them keeps
// the proxies sampled.
func (s *Sampler) Series(names ...string) ([]*corpusv1.Series, time.Duration) {
	s.asked.Store(time.Now().UnixNano())
	var out []*corpusv1.Series
	for _, sr := range s.store.Get(names...) {
		o := &corpusv1.Series{Name: sr.Name, Labels: sr.Labels}
		for _, p := range sr.Points {
			o.Points = append(o.Points, &corpusv1.SeriesPoint{Unix: p.At.Unix(), Value: p.Value})
		}
		out = append(out, o)
	}
	return out, s.cfg.Interval
}

// Run samples every interval until ctx ends.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	prev := map[string]loadCounters{} // by node id
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		prev = s.sample(ctx, prev)
	}
}

// loadCounters are one node proxy's answer counters at a time.
type loadCounters struct {
	at               time.Time
	requests, errors map[string]uint64
}

func (s *Sampler) sample(ctx context.Context, prev map[string]loadCounters) map[string]loadCounters {
	view := s.cfg.State.Read()
	now := time.Now()
	var samples []Sample
	var ready []*corpusv1.Node
	for _, n := range view.Nodes() {
		if c, alloc := n.GetCapacity(), view.NodeAllocated(n.Id); c != nil && alloc != nil {
			l := map[string]string{"node": n.Name}
			if c.CpuMillis > 0 {
				samples = append(samples, Sample{Name: nodeCPU, Labels: l, Value: float64(alloc.CpuMillis) / float64(c.CpuMillis)})
			}
			if c.MemoryBytes > 0 {
				samples = append(samples, Sample{Name: nodeMemory, Labels: l, Value: float64(alloc.MemoryBytes) / float64(c.MemoryBytes)})
			}
		}
		if n.Status == state.NodeReady && n.AgentAddress != "" {
			ready = append(ready, n)
		}
	}
	next := map[string]loadCounters{}
	if time.Since(time.Unix(0, s.asked.Load())) > idle {
		ready = nil
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, parallel)
	for _, n := range ready {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			cctx, cancel := context.WithTimeout(ctx, s.cfg.Interval/2)
			defer cancel()
			res, err := s.cfg.Loads.Load(cctx, n)
			if err != nil {
				s.cfg.Logger.Debug("sampling a node's proxy for the dashboard", "node", n.Name, "error", err)
				return
			}
			mu.Lock()
			next[n.Id] = loadCounters{at: time.Now(), requests: res.Requests, errors: res.Errors}
			mu.Unlock()
		}()
	}
	wg.Wait()
	// A domain served by several nodes sums their rates.
	reqs, errs := map[string]float64{}, map[string]float64{}
	for id, cur := range next {
		old, ok := prev[id]
		if !ok {
			continue // a first reading gives no rate
		}
		for d, r := range Rates(old.requests, cur.requests, cur.at.Sub(old.at)) {
			reqs[d] += r
		}
		for d, r := range Rates(old.errors, cur.errors, cur.at.Sub(old.at)) {
			errs[d] += r
		}
	}
	done := map[string]bool{}
	for _, r := range view.Routes() {
		if _, sampled := reqs[r.Domain]; !sampled || done[r.Domain] {
			continue
		}
		done[r.Domain] = true
		l := map[string]string{"domain": r.Domain}
		samples = append(samples,
			Sample{Name: domainRequests, Labels: l, Value: reqs[r.Domain]},
			Sample{Name: domainErrors, Labels: l, Value: errs[r.Domain]})
	}
	s.store.Add(now, samples)
	return next
}
