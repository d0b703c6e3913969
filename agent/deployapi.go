package agent

import (
	"context"
	"path/filepath"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/agent/deploy"
	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// The deploy pipeline (agent/deploy): the agent hands it its components,
// answers what it asks of the node (deployAgent), and passes the API's
// release calls through once the caller is checked.

// deployAgent is the agent as its deploy pipeline sees it.
type deployAgent struct{ a *Agent }

var _ deploy.Agent = deployAgent{}

func (d deployAgent) Guest(name string) (*corpusv1.Guest, drivers.Driver) {
	g := d.a.desiredByName(name)
	if g == nil {
		return nil, nil
	}
	return g, d.a.drivers[g.Spec.GetDriver()]
}

func (d deployAgent) GuestObserved(id string) *corpusv1.GuestObserved {
	d.a.mu.Lock()
	defer d.a.mu.Unlock()
	if o := d.a.observed[id]; o != nil {
		return proto.CloneOf(o)
	}
	return nil
}

func (d deployAgent) DesiredKnown() bool {
	d.a.mu.Lock()
	defer d.a.mu.Unlock()
	return d.a.known
}

func (d deployAgent) CallCoordinator(f func(corpusv1connect.AgentServiceClient) error) error {
	return d.a.callCoordinator(f)
}

// newDeploys builds the agent's deploy pipeline, once its cache, runtime,
// logs, drivers and network are in place.
func (a *Agent) newDeploys() (*deploy.Pipeline, error) {
	cfg := deploy.Config{
		MaxPushBytes: a.cfg.GitMaxPushBytes,
		Cache:        a.cache,
		Runtime:      a.runtime,
		Logs:         a.logs,
		Metrics:      a.cfg.Metrics,
		Logger:       a.logger,
	}
	if a.cfg.GitAddr != "" {
		cfg.GitDir = filepath.Join(a.cfg.StateDir, "git")
	}
	if a.net != nil {
		cfg.Proxy = a.net.Proxy()
	}
	return deploy.New(cfg, deployAgent{a})
}

// Redeploy runs a release of the serving commit, or a restart of its
// processes (deploy.Pipeline.Redeploy), under the agent's run.
func (s *agentAPI) Redeploy(ctx context.Context, req *connect.Request[corpusv1.AgentRedeployRequest], stream *connect.ServerStream[corpusv1.DeployOutput]) error {
	if err := s.a.checkCaller(req.Header()); err != nil {
		return err
	}
	return s.a.deploys.Redeploy(ctx, s.a.runCtx, req.Msg, stream.Send)
}

// ReleaseSource streams a commit's objects to the agent of another
// instance (deploy.Pipeline.ReleaseSource).
func (s *agentAPI) ReleaseSource(ctx context.Context, req *connect.Request[corpusv1.ReleaseSourceRequest], stream *connect.ServerStream[corpusv1.SourceChunk]) error {
	if err := s.a.checkCaller(req.Header()); err != nil {
		return err
	}
	return s.a.deploys.ReleaseSource(ctx, req.Msg, stream.Send)
}

// Rollback makes a kept release current again (deploy.Pipeline.Rollback).
func (s *agentAPI) Rollback(ctx context.Context, req *connect.Request[corpusv1.RollbackRequest], stream *connect.ServerStream[corpusv1.RollbackOutput]) error {
	if err := s.a.checkCaller(req.Header()); err != nil {
		return err
	}
	return s.a.deploys.Rollback(ctx, req.Msg, stream.Send)
}

// Processes says how a project environment's processes are
// (deploy.Pipeline.Processes).
func (s *agentAPI) Processes(ctx context.Context, req *connect.Request[corpusv1.ListProcessesRequest]) (*connect.Response[corpusv1.ListProcessesResponse], error) {
	if err := s.a.checkCaller(req.Header()); err != nil {
		return nil, err
	}
	res, err := s.a.deploys.Processes(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}
