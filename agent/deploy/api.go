package deploy

import (
	"context"

	"connectrpc.com/connect"

	corpusv1 "corpus/proto/corpus/v1"
)

// Releases serves the release procedures of the agent's API through the
// pipeline; the caller is checked before.
type Releases struct {
	Pipeline *Pipeline
	// Run is the agent's run: a redeploy goes on under it when its
	// caller goes.
	Run context.Context
}

// Redeploy runs a release of the serving commit, or a restart of its
// processes (Pipeline.Redeploy), under the agent's run.
func (s Releases) Redeploy(ctx context.Context, req *connect.Request[corpusv1.AgentRedeployRequest], stream *connect.ServerStream[corpusv1.DeployOutput]) error {
	return s.Pipeline.Redeploy(ctx, s.Run, req.Msg, stream.Send)
}

// ReleaseSource streams a commit's objects to the agent of another
// instance (Pipeline.ReleaseSource).
func (s Releases) ReleaseSource(ctx context.Context, req *connect.Request[corpusv1.ReleaseSourceRequest], stream *connect.ServerStream[corpusv1.SourceChunk]) error {
	return s.Pipeline.ReleaseSource(ctx, req.Msg, stream.Send)
}

// Rollback makes a kept release current again (Pipeline.Rollback).
func (s Releases) Rollback(ctx context.Context, req *connect.Request[corpusv1.RollbackRequest], stream *connect.ServerStream[corpusv1.RollbackOutput]) error {
	return s.Pipeline.Rollback(ctx, req.Msg, stream.Send)
}

// Processes says how a project environment's processes are
// (Pipeline.Processes).
func (s Releases) Processes(ctx context.Context, req *connect.Request[corpusv1.ListProcessesRequest]) (*connect.Response[corpusv1.ListProcessesResponse], error) {
	res, err := s.Pipeline.Processes(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}
