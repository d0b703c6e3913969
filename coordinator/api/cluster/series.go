package cluster

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/api"
	"corpus/coordinator/auth"
	corpusv1 "corpus/proto/corpus/v1"
)

// Wait answers once this replica applied a write past after_index, or
// the wait is over: the dashboard's live updates.
func (s *clusterService) Wait(ctx context.Context, req *connect.Request[corpusv1.WaitRequest]) (*connect.Response[corpusv1.WaitResponse], error) {
	ctx, cancel := context.WithTimeout(ctx, api.WaitFor(req.Msg.WaitSeconds))
	defer cancel()
	for {
		view := s.b.Store.Read()
		index := view.WatchIndex()
		if index > req.Msg.AfterIndex {
			return connect.NewResponse(&corpusv1.WaitResponse{Index: index}), nil
		}
		if err := view.Wait(ctx); err != nil {
			if ctx.Err() == context.DeadlineExceeded {
				return connect.NewResponse(&corpusv1.WaitResponse{Index: index}), nil
			}
			return nil, api.ToConnect(err)
		}
	}
}

// Series returns the recent values this replica sampled: the nodes'
// allocation to every user, a domain's traffic to those who see its
// route (see auth.Scope).
func (s *clusterService) Series(ctx context.Context, req *connect.Request[corpusv1.SeriesRequest]) (*connect.Response[corpusv1.SeriesResponse], error) {
	res := &corpusv1.SeriesResponse{}
	if s.b.Series == nil {
		return connect.NewResponse(res), nil
	}
	all, step := s.b.Series.Series(req.Msg.Names...)
	res.StepSeconds = int64(step / time.Second)
	view := s.b.Store.Read()
	sc := auth.ScopeOf(view, auth.FromContext(ctx))
	domains := map[string]bool{}
	for _, r := range view.Routes() {
		if sc.Route(r) != auth.NoAccess {
			domains[r.Domain] = true
		}
	}
	for _, sr := range all {
		if d, ok := sr.Labels["domain"]; ok && !domains[d] {
			continue
		}
		res.Series = append(res.Series, sr)
	}
	return connect.NewResponse(res), nil
}
