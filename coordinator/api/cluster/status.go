// Package cluster serves ClusterService: the cluster's status, the Raft
// group's membership and the calls replicas make of each other (writes
// passed to the leader, heartbeats, read indexes), the keyring's
// rotation, and the dashboard's blocking read and plots.
package cluster

import (
	"context"

	"connectrpc.com/connect"

	"corpus/coordinator/api"
	"corpus/coordinator/auth"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// New returns the handler of ClusterService.
func New(b *api.Backend) corpusv1connect.ClusterServiceHandler { return &clusterService{b} }

type clusterService struct{ b *api.Backend }

func (s *clusterService) Status(ctx context.Context, _ *connect.Request[corpusv1.StatusRequest]) (*connect.Response[corpusv1.StatusResponse], error) {
	view := s.b.Store.Read()
	res := &corpusv1.StatusResponse{
		Leader:  s.b.LeaderAddr(),
		Index:   view.Index(),
		Version: versionString(),
		Nodes:   int32(len(view.Nodes())),
		Guests:  int32(len(view.Guests())),
		Who:     auth.FromContext(ctx).String(),
	}
	if s.b.Group != nil {
		res.Replica = s.b.Group.Self().Id
		res.Replicas, _ = s.b.Group.Peers() // none while the group is not formed
		if id, _ := s.b.Group.Leader(); id != "" {
			res.LeaderApi = view.Coordinator(id).GetApiAddress()
		}
	}
	if cfg := view.Config(); cfg != nil {
		res.ClusterId = cfg.ClusterId
	}
	if cv := view.ClusterVersion(); !cv.IsZero() {
		res.ClusterVersion = cv.String()
	}
	return connect.NewResponse(res), nil
}
