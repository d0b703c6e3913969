// Package volumes serves VolumeService: guests' volumes listed, resized,
// moved, snapshotted, backed up and restored.
package volumes

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"corpus/coordinator/api"
	"corpus/coordinator/auth"
	"corpus/coordinator/state"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
	"corpus/volume"
)

// New returns the handler of VolumeService.
func New(b *api.Backend) corpusv1connect.VolumeServiceHandler { return &volumeService{b} }

type volumeService struct{ b *api.Backend }

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
	sc := auth.ScopeOf(view, auth.FromContext(ctx))
	for _, v := range view.Volumes() {
		if sc.Volume(v) != auth.NoAccess {
			res.Volumes = append(res.Volumes, volumeView(view, v))
		}
	}
	return connect.NewResponse(res), nil
}

func (s *volumeService) GetVolume(ctx context.Context, req *connect.Request[corpusv1.GetVolumeRequest]) (*connect.Response[corpusv1.GetVolumeResponse], error) {
	view := s.b.Store.Read()
	v := view.Volume(req.Msg.Name)
	if v == nil {
		return nil, api.ToConnect(api.NotFound("volume", req.Msg.Name, "corpus volume list"))
	}
	if err := api.MaySee(ctx, auth.ScopeOf(view, auth.FromContext(ctx)).Volume(v), "volume", v.Name); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.GetVolumeResponse{Volume: volumeView(view, v)}), nil
}

func (s *volumeService) DeleteVolume(ctx context.Context, req *connect.Request[corpusv1.DeleteVolumeRequest]) (*connect.Response[corpusv1.DeleteVolumeResponse], error) {
	if err := names.Validate("volume", req.Msg.Name); err != nil {
		return nil, api.ToConnect(err)
	}
	if s.b.Store.Read().Volume(req.Msg.Name) == nil {
		return nil, api.ToConnect(api.NotFound("volume", req.Msg.Name, "corpus volume list"))
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_DeleteVolume{DeleteVolume: &corpusv1.DeleteVolume{Name: req.Msg.Name}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.DeleteVolumeResponse{Volume: s.b.Store.Read().Volume(req.Msg.Name)}), nil
}

func (s *volumeService) ResizeVolume(ctx context.Context, req *connect.Request[corpusv1.ResizeVolumeRequest]) (*connect.Response[corpusv1.ResizeVolumeResponse], error) {
	m := req.Msg
	if err := names.Validate("volume", m.Name); err != nil {
		return nil, api.ToConnect(err)
	}
	v := s.b.Store.Read().Volume(m.Name)
	if v == nil {
		return nil, api.ToConnect(api.NotFound("volume", m.Name, "corpus volume list"))
	}
	size := m.SizeBytes
	switch {
	case size != 0 && m.DeltaBytes != 0:
		return nil, api.ToConnect(api.Invalidf("give a new size or a change, not both"))
	case size == 0:
		size = v.SizeBytes + m.DeltaBytes
	}
	size, err := volume.NormalizeSize(size)
	if err != nil {
		return nil, api.ToConnect(api.Invalidf("%v", err))
	}
	if size == v.SizeBytes {
		return connect.NewResponse(&corpusv1.ResizeVolumeResponse{Volume: v}), nil
	}
	if size < v.SizeBytes {
		if err := s.admitShrink(ctx, v, size, m.AllowShrink); err != nil {
			return nil, err
		}
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_ResizeVolume{ResizeVolume: &corpusv1.ResizeVolume{Name: v.Name, SizeBytes: size}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.ResizeVolumeResponse{Volume: s.b.Store.Read().Volume(v.Name), Changed: true}), nil
}

// admitShrink refuses to shrink volume v to size unless asked to
// (allowShrink) and the data its node measures now fits in size with
// the safety margin. The last report will not do: data written since
// (a report comes only when something changed) would not fit, and the
// node would refuse a shrink the API had accepted.
func (s *volumeService) admitShrink(ctx context.Context, v *corpusv1.Volume, size int64, allowShrink bool) error {
	refuse := func(err error) error {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("volume %s: %w; nothing changed", v.Name, err))
	}
	if !allowShrink {
		return refuse(volume.CheckShrink(0, size, false))
	}
	var used int64 // a volume on no node yet was never made: it holds nothing
	if n := s.b.Store.Read().Node(v.NodeId); n != nil {
		res, err := s.b.AgentClient(n).MeasureVolume(ctx, connect.NewRequest(&corpusv1.MeasureVolumeRequest{Name: v.Name}))
		if err != nil {
			code := connect.CodeUnavailable
			if connect.CodeOf(err) == connect.CodeUnimplemented {
				code = connect.CodeFailedPrecondition
			}
			return connect.NewError(code, fmt.Errorf("volume %s: measuring what it holds on node %s: %w; nothing changed", v.Name, n.Name, err))
		}
		used = res.Msg.UsedBytes
	} else if v.NodeId != "" {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("volume %s: its node is not in the cluster's state; nothing changed", v.Name))
	}
	if err := volume.CheckShrink(used, size, true); err != nil {
		return refuse(err)
	}
	return nil
}

// moveChunkProgress is how often MoveVolume reports progress.
const moveChunkProgress = 8 << 20

func (s *volumeService) MoveVolume(ctx context.Context, req *connect.Request[corpusv1.MoveVolumeRequest], stream *connect.ServerStream[corpusv1.MoveVolumeProgress]) error {
	m := req.Msg
	if err := names.Validate("volume", m.Name); err != nil {
		return api.ToConnect(err)
	}
	if err := api.NodeRef(m.ToNode); err != nil {
		return api.ToConnect(err)
	}
	view := s.b.Store.Read()
	v := view.Volume(m.Name)
	if v == nil {
		return api.ToConnect(api.NotFound("volume", m.Name, "corpus volume list"))
	}
	to := api.FindNode(view, m.ToNode)
	from := view.Node(v.NodeId)
	switch {
	case to == nil:
		return api.ToConnect(api.NotFound("node", m.ToNode, "corpus node list"))
	case v.GuestId != "":
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("volume %s is used by guest %s; delete the guest (the volume stays), move it, then create the guest with --use-volume", v.Name, v.GuestName))
	case v.DesiredState == state.VolumeDeleted:
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("volume %s is being deleted", v.Name))
	case from == nil:
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("volume %s is on no node yet; nothing to move", v.Name))
	case v.PreviousNodeId != "":
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("volume %s moved recently; its old copy is still being removed, retry shortly", v.Name))
	case from.Id == to.Id:
		return stream.Send(&corpusv1.MoveVolumeProgress{Finished: true, Volume: v}) // already there
	case to.Status != state.NodeReady || from.Status != state.NodeReady:
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("both nodes must be ready (%s is %s, %s is %s)", from.Name, from.Status, to.Name, to.Status))
	}
	// Copy: the source agent streams the image, this replica relays it to
	// the target agent. Cancelling the import makes the target drop what
	// it received.
	exp, err := s.b.AgentClient(from).ExportVolume(ctx, connect.NewRequest(&corpusv1.ExportVolumeRequest{Name: v.Name}))
	if err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("exporting from node %s: %w", from.Name, err))
	}
	defer exp.Close()
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	imp := s.b.AgentClient(to).ImportVolume(ictx)
	var done, total, reported int64
	for exp.Receive() {
		c := exp.Msg()
		if c.TotalBytes > 0 {
			total = c.TotalBytes
		}
		c.Name = v.Name
		if err := imp.Send(c); err != nil {
			break // the error comes with CloseAndReceive
		}
		done += int64(len(c.Data))
		if done-reported >= moveChunkProgress {
			reported = done
			if err := stream.Send(&corpusv1.MoveVolumeProgress{DoneBytes: done, TotalBytes: total}); err != nil {
				return err
			}
		}
	}
	if err := exp.Err(); err != nil {
		cancel()
		imp.CloseAndReceive()
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("reading volume %s from node %s: %w", v.Name, from.Name, err))
	}
	if _, err := imp.CloseAndReceive(); err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("writing volume %s to node %s: %w", v.Name, to.Name, err))
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_MoveVolume{MoveVolume: &corpusv1.MoveVolume{Name: v.Name, NodeId: to.Id}}}); err != nil {
		return err
	}
	return stream.Send(&corpusv1.MoveVolumeProgress{DoneBytes: done, TotalBytes: total, Finished: true, Volume: s.b.Store.Read().Volume(v.Name)})
}

func (s *volumeService) SnapshotVolume(ctx context.Context, req *connect.Request[corpusv1.SnapshotVolumeRequest]) (*connect.Response[corpusv1.SnapshotVolumeResponse], error) {
	if err := names.Validate("volume", req.Msg.Name); err != nil {
		return nil, api.ToConnect(err)
	}
	view := s.b.Store.Read()
	v := view.Volume(req.Msg.Name)
	if v == nil {
		return nil, api.ToConnect(api.NotFound("volume", req.Msg.Name, "corpus volume list"))
	}
	n := view.Node(v.NodeId)
	if n == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("volume %s is on no node yet; nothing to copy", v.Name))
	}
	res, err := s.b.AgentClient(n).SnapshotVolume(ctx, req)
	if err != nil {
		return nil, err
	}
	res.Msg.NodeName = n.Name
	return res, nil
}
