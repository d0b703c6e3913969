package api

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/autoscale"
	"corpus/coordinator/scheduler"
	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// DefaultAutoscaleInterval is how often the leader samples the load of
// autoscaled environments and decides (the HPA's sync period).
const DefaultAutoscaleInterval = 15 * time.Second

func (s *projectService) Autoscale(ctx context.Context, req *connect.Request[corpusv1.AutoscaleRequest]) (*connect.Response[corpusv1.AutoscaleResponse], error) {
	m := req.Msg
	view := s.b.Store.Read()
	p, e, err := pickEnv(ctx, view, m.Project, m.Env)
	if err != nil {
		return nil, err
	}
	if err := validProcessName(m.Process); err != nil {
		return nil, toConnect(err)
	}
	cmd := &corpusv1.SetAutoscale{Project: p.Name, Env: e.Name, Process: m.Process}
	if !m.Off {
		cmd.Policy = &corpusv1.AutoscalePolicy{Min: m.Min, Max: m.Max, TargetCpuPercent: m.TargetCpuPercent, TargetRps: m.TargetRps, ScaleDownWindowSeconds: m.ScaleDownWindowSeconds}
		if why := state.ValidAutoscale(cmd.Policy); why != "" {
			return nil, toConnect(invalidf("autoscale %s: %s", m.Process, why))
		}
		// The policy's range must be a scale the environment may take.
		if _, _, err := scaleCommand(view, p, e, map[string]uint32{m.Process: m.Max}, false, 0); err != nil {
			return nil, err
		}
	}
	if _, err := s.b.write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetAutoscale{SetAutoscale: cmd}}); err != nil {
		return nil, err
	}
	view = s.b.Store.Read()
	return connect.NewResponse(&corpusv1.AutoscaleResponse{Project: s.view(view, view.Project(p.Name))}), nil
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
	b     *Backend
	recs  map[string]*autoscale.Recommender
	prev  map[string]loadSample
	noted map[string]string
}

// AutoscaleLoop samples the load of every autoscaled environment from the
// agents of its nodes every interval and scales each policy's process
// type as autoscale decides, as the actor "autoscaler": each change is in
// the audit log with its reason, and in the policy's last decision. Run it
// on the Raft leader.
func (b *Backend) AutoscaleLoop(ctx context.Context) {
	every := b.AutoscaleInterval
	if every <= 0 {
		every = DefaultAutoscaleInterval
	}
	as := &autoscaler{b: b, recs: map[string]*autoscale.Recommender{}, prev: map[string]loadSample{}, noted: map[string]string{}}
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

func (as *autoscaler) pass(ctx context.Context) {
	view := as.b.Store.Read()
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
				res, err := as.b.AgentClient(n).Load(cctx, connect.NewRequest(&corpusv1.LoadRequest{}))
				cancel()
				if err != nil {
					as.b.Logger.Warn("sampling a node's load for the autoscaler", "node", n.Name, "error", err)
					continue
				}
				cur := loadSample{at: time.Now(), res: res.Msg}
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
		rec = &autoscale.Recommender{}
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
	cmd, _, err := scaleCommand(view, p, e, map[string]uint32{process: n}, false, 0)
	if err != nil {
		as.b.Logger.Warn("autoscaling", "project", p.Name, "env", e.Name, "process", process, "error", err)
		return
	}
	cmd.Autoscaled, cmd.Reason = process, why
	if _, err := as.b.Propose(ctx, &corpusv1.Command{Actor: "autoscaler", Cmd: &corpusv1.Command_ScaleEnv{ScaleEnv: cmd}}); err != nil {
		as.b.Logger.Warn("autoscaling", "project", p.Name, "env", e.Name, "process", process, "error", err)
		return
	}
	as.b.Logger.Info("autoscaled", "project", p.Name, "env", e.Name, "process", process, "count", n, "why", why)
}

// measure is a policy's metric per instance from two samples of each
// node: CPU percent of the guests' allowance, or requests per second of
// the environment's domains over the instances.
func measure(pol *corpusv1.AutoscalePolicy, e *corpusv1.ProjectEnv, guests []*corpusv1.Guest, samples map[string][2]loadSample) (autoscale.Load, bool) {
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
				return autoscale.Load{}, false
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
			return autoscale.Load{}, false
		}
		return autoscale.Load{PerInstance: reqs / float64(len(guests)), What: "rps"}, true
	}
	var sum float64
	for _, g := range guests {
		s, ok := samples[g.NodeId]
		if !ok || s[0].res == nil {
			return autoscale.Load{}, false
		}
		a, b := guestLoad(s[0].res, g.Id), guestLoad(s[1].res, g.Id)
		if a == nil || b == nil || a.Pid != b.Pid || b.CpuSeconds < a.CpuSeconds {
			return autoscale.Load{}, false // restarted between the samples
		}
		cpus := b.Cpus
		if cpus <= 0 {
			cpus = 1
		}
		sum += (b.CpuSeconds - a.CpuSeconds) / s[1].at.Sub(s[0].at).Seconds() / cpus * 100
	}
	if len(guests) == 0 {
		return autoscale.Load{}, false
	}
	return autoscale.Load{PerInstance: sum / float64(len(guests)), What: "cpu%"}, true
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
