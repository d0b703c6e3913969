package autoscale

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"corpus/coordinator/scheduler"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// DefaultInterval is how often the leader samples the load of
// autoscaled environments and decides (the HPA's sync period).
const DefaultInterval = 15 * time.Second

// NodeLoads reads a node's load from its agent.
type NodeLoads interface {
	Load(ctx context.Context, node *corpusv1.Node) (*corpusv1.LoadResponse, error)
}

// Scaler writes an autoscaling decision: process of environment e of
// project p (as of view) to n instances, for the reason why (n the
// current count: only the reason is recorded), as the actor
// "autoscaler". An error says the write was refused or failed.
type Scaler interface {
	ScaleProcess(ctx context.Context, view *state.Snap, p *corpusv1.Project, e *corpusv1.ProjectEnv, process string, n uint32, why string) error
}

// Loop samples the load of every autoscaled environment from the agents
// of its nodes every Interval and scales each policy's process type as a
// Recommender decides: each change is in the audit log with its reason,
// and in the policy's last decision. Run it on the Raft leader.
type Loop struct {
	Store    *state.Store
	Loads    NodeLoads
	Scaler   Scaler
	Interval time.Duration // 0: DefaultInterval
	Logger   *slog.Logger
}

// Run decides every Interval until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	every := l.Interval
	if every <= 0 {
		every = DefaultInterval
	}
	as := &autoscaler{l: l, recs: map[string]*Recommender{}, prev: map[string]loadSample{}, noted: map[string]string{}}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		as.pass(ctx)
	}
}

// loadSample is one node's load as its agent said at a time.
type loadSample struct {
	at  time.Time
	res *corpusv1.LoadResponse
}

// autoscaler is the leader's state between passes: the recommendations
// of each process type, the nodes' last samples, the last reason written
// without a change (said once, not every pass).
type autoscaler struct {
	l     *Loop
	recs  map[string]*Recommender
	prev  map[string]loadSample
	noted map[string]string
}

func (as *autoscaler) pass(ctx context.Context) {
	view := as.l.Store.Read()
	samples := map[string][2]loadSample{} // node id → previous, current
	for _, p := range view.Projects() {
		for _, e := range p.Envs {
			if len(e.Autoscale) == 0 {
				continue
			}
			for _, id := range view.EnvNodes(e) {
				if _, done := samples[id]; done {
					continue
				}
				n := view.Node(id)
				if n == nil || n.Status != state.NodeReady || n.AgentAddress == "" {
					continue
				}
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				res, err := as.l.Loads.Load(cctx, n)
				cancel()
				if err != nil {
					as.l.Logger.Warn("sampling a node's load for the autoscaler", "node", n.Name, "error", err)
					continue
				}
				cur := loadSample{at: time.Now(), res: res}
				samples[id] = [2]loadSample{as.prev[id], cur}
				as.prev[id] = cur
			}
		}
	}
	for _, p := range view.Projects() {
		for _, e := range p.Envs {
			for _, process := range slices.Sorted(maps.Keys(e.Autoscale)) {
				as.decide(ctx, view, p, e, process, samples)
			}
		}
	}
}

func (as *autoscaler) decide(ctx context.Context, view *state.Snap, p *corpusv1.Project, e *corpusv1.ProjectEnv, process string, samples map[string][2]loadSample) {
	pol := e.Autoscale[process]
	key := p.Name + "/" + e.Name + "/" + process
	current := uint32(1)
	if c, ok := e.Scale[process]; ok {
		current = c
	}
	// Instances that do not serve yet (just added, or being repaired)
	// would skew the mean: no decision until every one serves.
	var guests []*corpusv1.Guest
	for _, in := range state.Instances(e) {
		if in.Index > current {
			continue
		}
		g := view.Guest(in.GuestID)
		ready := g != nil && g.NodeId != "" && g.GetObserved().GetState() == state.ObservedRunning &&
			(in.Index == 1 && e.CurrentRelease != 0 || in.Index > 1 && g.GetObserved().GetRelease() == e.CurrentRelease)
		if !ready {
			return
		}
		guests = append(guests, g)
	}
	l, ok := measure(pol, e, guests, samples)
	if !ok {
		return
	}
	rec := as.recs[key]
	if rec == nil {
		rec = &Recommender{}
		as.recs[key] = rec
	}
	want, why := rec.Decide(time.Now(), pol, current, l)
	if want > current {
		need := int(corpusv1.InstanceCount(withCount(e.Scale, process, want))) - len(e.Instances) - 1
		if need > 0 {
			primary := view.Guest(e.GuestId)
			if fits, reason := scheduler.Room(view, primary, e.Name, need); fits < need {
				want -= uint32(need - fits)
				why += fmt.Sprintf("; capped at %d: %s", max(want, current), reason)
				want = max(want, current)
			}
		}
	}
	if want == current {
		if strings.Contains(why, "capped") && as.noted[key] != why {
			as.noted[key] = why
			as.write(ctx, view, p, e, process, current, why)
		}
		return
	}
	delete(as.noted, key)
	as.write(ctx, view, p, e, process, want, why)
}

// write scales process to n for the reason given (n the same: only the
// reason is recorded).
func (as *autoscaler) write(ctx context.Context, view *state.Snap, p *corpusv1.Project, e *corpusv1.ProjectEnv, process string, n uint32, why string) {
	if err := as.l.Scaler.ScaleProcess(ctx, view, p, e, process, n, why); err != nil {
		as.l.Logger.Warn("autoscaling", "project", p.Name, "env", e.Name, "process", process, "error", err)
		return
	}
	as.l.Logger.Info("autoscaled", "project", p.Name, "env", e.Name, "process", process, "count", n, "why", why)
}

// measure is a policy's metric per instance from two samples of each
// node: CPU percent of the guests' allowance, or requests per second of
// the environment's domains over the instances.
func measure(pol *corpusv1.AutoscalePolicy, e *corpusv1.ProjectEnv, guests []*corpusv1.Guest, samples map[string][2]loadSample) (Load, bool) {
	if pol.GetTargetRps() > 0 {
		domains := append(append([]string(nil), e.Domains...), e.ManifestDomains...)
		var reqs, secs float64
		seen := map[string]bool{}
		for _, g := range guests {
			if seen[g.NodeId] {
				continue
			}
			seen[g.NodeId] = true
			s, ok := samples[g.NodeId]
			if !ok || s[0].res == nil {
				return Load{}, false
			}
			dt := s[1].at.Sub(s[0].at).Seconds()
			for _, d := range domains {
				if a, b := s[0].res.Requests[d], s[1].res.Requests[d]; b >= a {
					reqs += float64(b-a) / dt
				}
			}
			secs = dt
		}
		if secs <= 0 || len(guests) == 0 {
			return Load{}, false
		}
		return Load{PerInstance: reqs / float64(len(guests)), What: "rps"}, true
	}
	var sum float64
	for _, g := range guests {
		s, ok := samples[g.NodeId]
		if !ok || s[0].res == nil {
			return Load{}, false
		}
		a, b := guestLoad(s[0].res, g.Id), guestLoad(s[1].res, g.Id)
		if a == nil || b == nil || a.Pid != b.Pid || b.CpuSeconds < a.CpuSeconds {
			return Load{}, false // restarted between the samples
		}
		cpus := b.Cpus
		if cpus <= 0 {
			cpus = 1
		}
		sum += (b.CpuSeconds - a.CpuSeconds) / s[1].at.Sub(s[0].at).Seconds() / cpus * 100
	}
	if len(guests) == 0 {
		return Load{}, false
	}
	return Load{PerInstance: sum / float64(len(guests)), What: "cpu%"}, true
}

func guestLoad(res *corpusv1.LoadResponse, id string) *corpusv1.GuestLoad {
	for _, g := range res.Guests {
		if g.GuestId == id {
			return g
		}
	}
	return nil
}

func withCount(scale map[string]uint32, process string, n uint32) map[string]uint32 {
	out := map[string]uint32{process: n}
	for k, v := range scale {
		if k != process {
			out[k] = v
		}
	}
	return out
}
