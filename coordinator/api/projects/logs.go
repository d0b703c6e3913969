package projects

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/api"
	corpusv1 "corpus/proto/corpus/v1"
)

func (s *Service) ProjectLogs(ctx context.Context, req *connect.Request[corpusv1.ProjectLogsRequest], stream *connect.ServerStream[corpusv1.LogLine]) error {
	m := req.Msg
	view := s.b.Store.Read()
	_, e, err := api.PickEnv(ctx, view, m.Project, m.Env)
	if err != nil {
		return err
	}
	filter := proto.Clone(m.GetFilter()).(*corpusv1.GuestLogsRequest)
	if m.Filter == nil {
		filter = &corpusv1.GuestLogsRequest{}
	}
	if err := api.ValidLogFilter(filter); err != nil {
		return err
	}
	// One guest per environment today; with several, their lines would
	// be merged here.
	return s.b.StreamLogs(ctx, e.GuestId, filter, stream.Send)
}
