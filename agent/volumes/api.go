package volumes

import (
	"context"

	"connectrpc.com/connect"

	corpusv1 "corpus/proto/corpus/v1"
)

// Transfers serves the volume procedures of the agent's API; the caller is
// checked before.
type Transfers struct{ M *Manager }

// MeasureVolume says what a volume of this node holds now (Manager.Measure).
func (s Transfers) MeasureVolume(ctx context.Context, req *connect.Request[corpusv1.MeasureVolumeRequest]) (*connect.Response[corpusv1.MeasureVolumeResponse], error) {
	res, err := s.M.Measure(ctx, req.Msg.Name)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

// ExportVolume streams a volume's image (Manager.Export).
func (s Transfers) ExportVolume(ctx context.Context, req *connect.Request[corpusv1.ExportVolumeRequest], stream *connect.ServerStream[corpusv1.VolumeChunk]) error {
	return s.M.Export(ctx, req.Msg.Name, stream.Send)
}

// ImportVolume makes a volume from a streamed image (Manager.Import).
func (s Transfers) ImportVolume(ctx context.Context, stream *connect.ClientStream[corpusv1.VolumeChunk]) (*connect.Response[corpusv1.ImportVolumeResponse], error) {
	res, err := s.M.Import(ctx, stream)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

// SnapshotVolume snapshots a volume (Manager.Snapshot).
func (s Transfers) SnapshotVolume(ctx context.Context, req *connect.Request[corpusv1.SnapshotVolumeRequest]) (*connect.Response[corpusv1.SnapshotVolumeResponse], error) {
	res, err := s.M.Snapshot(ctx, req.Msg.Name)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}
