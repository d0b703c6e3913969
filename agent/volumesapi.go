package agent

import (
	"context"

	"connectrpc.com/connect"

	corpusv1 "corpus/proto/corpus/v1"
)

// The volume procedures of the agent's API: the caller is checked here,
// the work is agent/volumes'.

func (s *agentAPI) MeasureVolume(ctx context.Context, req *connect.Request[corpusv1.MeasureVolumeRequest]) (*connect.Response[corpusv1.MeasureVolumeResponse], error) {
	if err := s.a.checkCaller(req.Header()); err != nil {
		return nil, err
	}
	res, err := s.a.vols.Measure(ctx, req.Msg.Name)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

func (s *agentAPI) ExportVolume(ctx context.Context, req *connect.Request[corpusv1.ExportVolumeRequest], stream *connect.ServerStream[corpusv1.VolumeChunk]) error {
	if err := s.a.checkCaller(req.Header()); err != nil {
		return err
	}
	return s.a.vols.Export(ctx, req.Msg.Name, stream.Send)
}

func (s *agentAPI) ImportVolume(ctx context.Context, stream *connect.ClientStream[corpusv1.VolumeChunk]) (*connect.Response[corpusv1.ImportVolumeResponse], error) {
	if err := s.a.checkCaller(stream.RequestHeader()); err != nil {
		return nil, err
	}
	res, err := s.a.vols.Import(ctx, stream)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

func (s *agentAPI) SnapshotVolume(ctx context.Context, req *connect.Request[corpusv1.SnapshotVolumeRequest]) (*connect.Response[corpusv1.SnapshotVolumeResponse], error) {
	if err := s.a.checkCaller(req.Header()); err != nil {
		return nil, err
	}
	res, err := s.a.vols.Snapshot(ctx, req.Msg.Name)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}
