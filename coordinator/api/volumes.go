package api

import (
	"context"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

type volumeService struct{ b *Backend }

func volumeView(view *state.Snap, v *corpusv1.Volume) *corpusv1.VolumeView {
	out := &corpusv1.VolumeView{Volume: v}
	if n := view.Node(v.NodeId); n != nil {
		out.NodeName = n.Name
	}
	return out
}

func (s *volumeService) ListVolumes(ctx context.Context, _ *connect.Request[corpusv1.ListVolumesRequest]) (*connect.Response[corpusv1.ListVolumesResponse], error) {
	view := s.b.Store.Read()
	res := &corpusv1.ListVolumesResponse{}
	for _, v := range view.Volumes() {
		res.Volumes = append(res.Volumes, volumeView(view, v))
	}
	return connect.NewResponse(res), nil
}

func (s *volumeService) GetVolume(ctx context.Context, req *connect.Request[corpusv1.GetVolumeRequest]) (*connect.Response[corpusv1.GetVolumeResponse], error) {
	view := s.b.Store.Read()
	v := view.Volume(req.Msg.Name)
	if v == nil {
		return nil, toConnect(notFound("volume", req.Msg.Name, "corpus volume list"))
	}
	return connect.NewResponse(&corpusv1.GetVolumeResponse{Volume: volumeView(view, v)}), nil
}

func (s *volumeService) DeleteVolume(ctx context.Context, req *connect.Request[corpusv1.DeleteVolumeRequest]) (*connect.Response[corpusv1.DeleteVolumeResponse], error) {
	if err := names.Validate("volume", req.Msg.Name); err != nil {
		return nil, toConnect(err)
	}
	if s.b.Store.Read().Volume(req.Msg.Name) == nil {
		return nil, toConnect(notFound("volume", req.Msg.Name, "corpus volume list"))
	}
	if _, err := s.b.write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_DeleteVolume{DeleteVolume: &corpusv1.DeleteVolume{Name: req.Msg.Name}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.DeleteVolumeResponse{Volume: s.b.Store.Read().Volume(req.Msg.Name)}), nil
}
