package agent

import (
	"context"
	"slices"

	"connectrpc.com/connect"

	"corpus/agent/load"
	corpusv1 "corpus/proto/corpus/v1"
)

// Load samples the CPU time of the node's guests (agent/load) and the
// proxy's request counts by route host, for the coordinator's autoscaler.
func (s *agentAPI) Load(ctx context.Context, req *connect.Request[corpusv1.LoadRequest]) (*connect.Response[corpusv1.LoadResponse], error) {
	a := s.a
	if err := a.checkCaller(req.Header()); err != nil {
		return nil, err
	}
	type sample struct {
		id   string
		pid  int64
		cpus float64
	}
	var todo []sample
	a.mu.Lock()
	for id, g := range a.desired {
		if len(req.Msg.GuestIds) > 0 && !slices.Contains(req.Msg.GuestIds, id) {
			continue
		}
		if o := a.observed[id]; o != nil && o.Pid > 0 {
			todo = append(todo, sample{id, o.Pid, float64(g.GetSpec().GetResources().GetCpuMillis()) / 1000})
		}
	}
	a.mu.Unlock()
	res := &corpusv1.LoadResponse{}
	for _, t := range todo {
		cpu, err := load.CPU(int(t.pid))
		if err != nil {
			continue // a guest stopping meanwhile; the next sample has it
		}
		res.Guests = append(res.Guests, &corpusv1.GuestLoad{GuestId: t.id, CpuSeconds: cpu, Pid: t.pid, Cpus: t.cpus})
	}
	if a.net != nil && a.net.Proxy() != nil {
		res.Requests, res.Errors = a.net.Proxy().Requests(), a.net.Proxy().Errors()
	}
	return connect.NewResponse(res), nil
}
