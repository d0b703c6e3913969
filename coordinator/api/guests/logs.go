package guests

import (
	"context"

	"corpus/coordinator/api"
	corpusv1 "corpus/proto/corpus/v1"

	"connectrpc.com/connect"

	"corpus/internal/names"
)

func (s *guestService) GuestLogs(ctx context.Context, req *connect.Request[corpusv1.GuestLogsRequest], stream *connect.ServerStream[corpusv1.LogLine]) error {
	m := req.Msg
	if err := names.Validate("guest", m.Name); err != nil {
		return api.ToConnect(err)
	}
	if err := api.ValidLogFilter(m); err != nil {
		return err
	}
	view := s.b.Store.Read()
	g := view.GuestByName(m.Name)
	if g == nil {
		return api.ToConnect(api.NotFound("guest", m.Name, "corpus guest list"))
	}
	if err := api.MayUseGuest(ctx, view, g); err != nil {
		return err
	}
	return s.b.StreamLogs(ctx, g.Id, m, stream.Send)
}
