package api

import (
	"context"
	"sync"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/auth"
	"corpus/coordinator/series"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// DefaultSeriesInterval is how often a replica samples the series the
// dashboard plots; SeriesPoints how many it keeps (an hour of them).
const (
	DefaultSeriesInterval = 15 * time.Second
	SeriesPoints          = 240
	// seriesIdle is how long after the last read of the series the
	// proxies are still sampled; seriesParallel how many at once.
	seriesIdle     = 10 * time.Minute
	seriesParallel = 16
)

// Series names (see corpusv1.Series).
const (
	seriesNodeCPU        = "node_cpu_allocated_ratio"
	seriesNodeMemory     = "node_memory_allocated_ratio"
	seriesDomainRequests = "domain_requests_per_second"
	seriesDomainErrors   = "domain_errors_per_second"
)

// Wait answers once this replica applied a write past after_index, or
// the wait is over: the dashboard's live updates.
func (s *clusterService) Wait(ctx context.Context, req *connect.Request[corpusv1.WaitRequest]) (*connect.Response[corpusv1.WaitResponse], error) {
	ctx, cancel := context.WithTimeout(ctx, waitFor(req.Msg.WaitSeconds))
	defer cancel()
	for {
		view := s.b.Store.Read()
		index := view.WatchIndex()
		if index > req.Msg.AfterIndex {
			return connect.NewResponse(&corpusv1.WaitResponse{Index: index}), nil
		}
		if err := view.Wait(ctx); err != nil {
			if ctx.Err() == context.DeadlineExceeded {
				return connect.NewResponse(&corpusv1.WaitResponse{Index: index}), nil
			}
			return nil, toConnect(err)
		}
	}
}

// Series returns the recent values this replica sampled: the nodes'
// allocation to every user, a domain's traffic to those who see its
// route (see auth.Scope).
func (s *clusterService) Series(ctx context.Context, req *connect.Request[corpusv1.SeriesRequest]) (*connect.Response[corpusv1.SeriesResponse], error) {
	s.b.seriesAsked.Store(time.Now().UnixNano())
	res := &corpusv1.SeriesResponse{StepSeconds: int64(s.b.seriesInterval() / time.Second)}
	if s.b.Series == nil {
		return connect.NewResponse(res), nil
	}
	view := s.b.Store.Read()
	sc := auth.ScopeOf(view, auth.FromContext(ctx))
	domains := map[string]bool{}
	for _, r := range view.Routes() {
		if sc.Route(r) != auth.NoAccess {
			domains[r.Domain] = true
		}
	}
	for _, sr := range s.b.Series.Get(req.Msg.Names...) {
		if d, ok := sr.Labels["domain"]; ok && !domains[d] {
			continue
		}
		out := &corpusv1.Series{Name: sr.Name, Labels: sr.Labels}
		for _, p := range sr.Points {
			out.Points = append(out.Points, &corpusv1.SeriesPoint{Unix: p.At.Unix(), Value: p.Value})
		}
		res.Series = append(res.Series, out)
	}
	return connect.NewResponse(res), nil
}

func (b *Backend) seriesInterval() time.Duration {
	if b.SeriesInterval <= 0 {
		return DefaultSeriesInterval
	}
	return b.SeriesInterval
}

// SeriesLoop samples, every interval, the allocation of every node (from
// the state) and the request and error rates of every domain (from the
// proxies of ready nodes, a few at a time) into b.Series. Every replica
// runs it, so the dashboard plots whichever replica it talks to; the
// proxies are asked only while someone reads the series (a dashboard
// open in the last seriesIdle), so a cluster nobody watches is not
// polled.
func (b *Backend) SeriesLoop(ctx context.Context) {
	if b.Series == nil {
		return
	}
	t := time.NewTicker(b.seriesInterval())
	defer t.Stop()
	prev := map[string]loadCounters{} // by node id
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		prev = b.sampleSeries(ctx, prev)
	}
}

// loadCounters are one node proxy's answer counters at a time.
type loadCounters struct {
	at               time.Time
	requests, errors map[string]uint64
}

func (b *Backend) sampleSeries(ctx context.Context, prev map[string]loadCounters) map[string]loadCounters {
	view := b.Store.Read()
	now := time.Now()
	var samples []series.Sample
	var ready []*corpusv1.Node
	for _, n := range view.Nodes() {
		if c, alloc := n.GetCapacity(), view.NodeAllocated(n.Id); c != nil && alloc != nil {
			l := map[string]string{"node": n.Name}
			if c.CpuMillis > 0 {
				samples = append(samples, series.Sample{Name: seriesNodeCPU, Labels: l, Value: float64(alloc.CpuMillis) / float64(c.CpuMillis)})
			}
			if c.MemoryBytes > 0 {
				samples = append(samples, series.Sample{Name: seriesNodeMemory, Labels: l, Value: float64(alloc.MemoryBytes) / float64(c.MemoryBytes)})
			}
		}
		if n.Status == state.NodeReady && n.AgentAddress != "" {
			ready = append(ready, n)
		}
	}
	next := map[string]loadCounters{}
	if time.Since(time.Unix(0, b.seriesAsked.Load())) > seriesIdle {
		ready = nil
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, seriesParallel)
	for _, n := range ready {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			cctx, cancel := context.WithTimeout(ctx, b.seriesInterval()/2)
			defer cancel()
			res, err := b.AgentClient(n).Load(cctx, connect.NewRequest(&corpusv1.LoadRequest{}))
			if err != nil {
				b.Logger.Debug("sampling a node's proxy for the dashboard", "node", n.Name, "error", err)
				return
			}
			mu.Lock()
			next[n.Id] = loadCounters{at: time.Now(), requests: res.Msg.Requests, errors: res.Msg.Errors}
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
		for d, r := range series.Rates(old.requests, cur.requests, cur.at.Sub(old.at)) {
			reqs[d] += r
		}
		for d, r := range series.Rates(old.errors, cur.errors, cur.at.Sub(old.at)) {
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
			series.Sample{Name: seriesDomainRequests, Labels: l, Value: reqs[r.Domain]},
			series.Sample{Name: seriesDomainErrors, Labels: l, Value: errs[r.Domain]})
	}
	b.Series.Add(now, samples)
	return next
}
