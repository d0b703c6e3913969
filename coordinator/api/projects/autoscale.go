package projects

import (
	"context"
	"errors"

	"corpus/coordinator/api"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

func (s *Service) Autoscale(ctx context.Context, req *connect.Request[corpusv1.AutoscaleRequest]) (*connect.Response[corpusv1.AutoscaleResponse], error) {
	m := req.Msg
	view := s.b.Store.Read()
	p, e, err := api.PickEnv(ctx, view, m.Project, m.Env)
	if err != nil {
		return nil, err
	}
	if err := api.ValidProcessName(m.Process); err != nil {
		return nil, api.ToConnect(err)
	}
	cmd := &corpusv1.SetAutoscale{Project: p.Name, Env: e.Name, Process: m.Process}
	if !m.Off {
		cmd.Policy = &corpusv1.AutoscalePolicy{Min: m.Min, Max: m.Max, TargetCpuPercent: m.TargetCpuPercent, TargetRps: m.TargetRps, ScaleDownWindowSeconds: m.ScaleDownWindowSeconds}
		if why := state.ValidAutoscale(cmd.Policy); why != "" {
			return nil, api.ToConnect(api.Invalidf("autoscale %s: %s", m.Process, why))
		}
		// The policy's range must be a scale the environment may take.
		// What instances removed just before left behind, still being
		// deleted on its node, only delays a scale up, which the
		// autoscaler makes on a later pass.
		if _, _, err := scaleCommand(view, p, e, map[string]uint32{m.Process: m.Max}, false, 0); err != nil && !errors.Is(err, errLeftover) {
			return nil, err
		}
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetAutoscale{SetAutoscale: cmd}}); err != nil {
		return nil, err
	}
	view = s.b.Store.Read()
	return connect.NewResponse(&corpusv1.AutoscaleResponse{Project: s.view(view, view.Project(p.Name))}), nil
}

// Scaler writes the autoscaler's decisions (coordinator/autoscale's
// Scaler).
type Scaler struct{ b *api.Backend }

// NewScaler returns the scaler the autoscaler writes through.
func NewScaler(b *api.Backend) *Scaler { return &Scaler{b} }

// ScaleProcess writes the autoscaler's decision: process of environment
// e of project p (as of view) to n instances for the reason why (n the
// current count: only the reason is recorded), as the actor
// "autoscaler" (coordinator/autoscale's Scaler).
func (s *Scaler) ScaleProcess(ctx context.Context, view *state.Snap, p *corpusv1.Project, e *corpusv1.ProjectEnv, process string, n uint32, why string) error {
	cmd, _, err := scaleCommand(view, p, e, map[string]uint32{process: n}, false, 0)
	if err != nil {
		return err
	}
	cmd.Autoscaled, cmd.Reason = process, why
	_, err = s.b.Propose(ctx, &corpusv1.Command{Actor: "autoscaler", Cmd: &corpusv1.Command_ScaleEnv{ScaleEnv: cmd}})
	return err
}
