package load

import (
	"context"

	"connectrpc.com/connect"

	corpusv1 "corpus/proto/corpus/v1"
)

// Sample is a guest whose CPU time the Load call reads.
type Sample struct {
	GuestID string
	PID     int64   // its init process
	CPUs    float64 // its CPU limit
}

// Counter counts the proxy's answers by route host (agent/network).
type Counter interface {
	Requests() map[string]uint64
	Errors() map[string]uint64
}

// Sampler serves the Load procedure of the agent's API; the caller is
// checked before.
type Sampler struct {
	// Guests are the running guests of this node among ids (all of
	// them when ids is empty).
	Guests func(ids []string) []Sample
	// Proxy is the node's proxy, nil when it runs none.
	Proxy Counter
}

// Load samples the CPU time of the node's guests and the proxy's
// request counts by route host, for the coordinator's autoscaler.
func (s Sampler) Load(ctx context.Context, req *connect.Request[corpusv1.LoadRequest]) (*connect.Response[corpusv1.LoadResponse], error) {
	res := &corpusv1.LoadResponse{}
	for _, t := range s.Guests(req.Msg.GuestIds) {
		cpu, err := CPU(int(t.PID))
		if err != nil {
			continue // a guest stopping meanwhile; the next sample has it
		}
		res.Guests = append(res.Guests, &corpusv1.GuestLoad{GuestId: t.GuestID, CpuSeconds: cpu, Pid: t.PID, Cpus: t.CPUs})
	}
	if s.Proxy != nil {
		res.Requests, res.Errors = s.Proxy.Requests(), s.Proxy.Errors()
	}
	return connect.NewResponse(res), nil
}
