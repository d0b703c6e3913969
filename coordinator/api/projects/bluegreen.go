package projects

import (
	"context"
	"fmt"
	"time"

	"corpus/coordinator/api"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/auth"
	corpusv1 "corpus/proto/corpus/v1"
)

// Blue-green deploys: the first instance's agent stages the release on
// every instance (RollInstance with stage), then SwitchEnv moves every
// domain at once; SwitchBack moves them back while the release before
// stands by.

// DefaultStandby is how long the release a blue-green deploy switched
// away from stands by when the deploy names no --keep; MaxStandby bounds
// it.
const (
	DefaultStandby = time.Hour
	MaxStandby     = 7 * 24 * time.Hour
)

// Deploy strategies (RedeployRequest.strategy).
const (
	StrategyRolling   = "rolling"
	StrategyBlueGreen = "blue-green"
)

func validStrategy(strategy string, keep int64) error {
	switch strategy {
	case "", StrategyRolling:
		if keep != 0 {
			return api.Invalidf("--keep is for --strategy blue-green")
		}
	case StrategyBlueGreen:
		if keep < 0 || time.Duration(keep)*time.Second > MaxStandby {
			return api.Invalidf("--keep %ds: at most %s", keep, MaxStandby)
		}
	default:
		return api.Invalidf("strategy %.40q: want rolling or blue-green", strategy)
	}
	return nil
}

func (s *Agent) SwitchEnv(ctx context.Context, req *connect.Request[corpusv1.SwitchEnvRequest]) (*connect.Response[corpusv1.SwitchEnvResponse], error) {
	m := req.Msg
	if err := validRelease(m.Project, m.Env); err != nil {
		return nil, api.ToConnect(err)
	}
	keep := time.Duration(m.KeepSeconds) * time.Second
	if keep <= 0 {
		keep = DefaultStandby
	}
	if keep > MaxStandby {
		return nil, api.ToConnect(api.Invalidf("keep %s: at most %s", keep, MaxStandby))
	}
	view := s.b.Store.Read()
	p := view.Project(m.Project)
	e := corpusv1.EnvNamed(p, m.Env)
	if e == nil {
		return nil, api.ToConnect(api.NotFound("environment", m.Project+"/"+m.Env, "corpus project list"))
	}
	cmd := &corpusv1.SwitchEnv{Project: p.Name, Env: e.Name, Release: m.Release, WebPort: m.WebPort, NodeId: auth.FromContext(ctx).NodeID,
		KeepUntil: timestamppb.New(time.Now().Add(keep)), InstancePorts: map[uint32]int32{}}
	for _, in := range e.Instances {
		o := view.Guest(in.GuestId).GetObserved()
		if o.GetStagedRelease() != m.Release {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("instance %d (%s) has not staged %s", in.Index, in.GuestName, corpusv1.ReleaseName(m.Release)))
		}
		cmd.InstancePorts[in.Index] = o.GetStagedPort()
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SwitchEnv{SwitchEnv: cmd}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.SwitchEnvResponse{}), nil
}

func (s *Service) SwitchBack(ctx context.Context, req *connect.Request[corpusv1.SwitchBackRequest]) (*connect.Response[corpusv1.SwitchBackResponse], error) {
	m := req.Msg
	view := s.b.Store.Read()
	p, e, err := api.PickEnv(ctx, view, m.Project, m.Env)
	if err != nil {
		return nil, err
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SwitchEnv{SwitchEnv: &corpusv1.SwitchEnv{Project: p.Name, Env: e.Name, Back: true}}}); err != nil {
		return nil, err
	}
	view = s.b.Store.Read()
	p = view.Project(p.Name)
	return connect.NewResponse(&corpusv1.SwitchBackResponse{Project: s.view(view, p), Current: corpusv1.EnvNamed(p, e.Name).CurrentRelease}), nil
}
