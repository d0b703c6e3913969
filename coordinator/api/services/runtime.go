package services

import (
	"context"
	"fmt"
	"maps"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/api"
	"corpus/coordinator/auth"
	"corpus/coordinator/keyring"
	corpusv1 "corpus/proto/corpus/v1"
)

// Runtime is the part of AgentService about services: what a service's
// guest runs.
type Runtime struct{ b *api.Backend }

// NewRuntime returns the part of AgentService about services.
func NewRuntime(b *api.Backend) *Runtime { return &Runtime{b} }

// ServiceRuntime gives the agent of a service's guest the service (its
// template's scripts included, its sealed secrets left out) and its
// scripts' environment, credentials opened.
func (s *Runtime) ServiceRuntime(ctx context.Context, req *connect.Request[corpusv1.ServiceRuntimeRequest]) (*connect.Response[corpusv1.ServiceRuntimeResponse], error) {
	p := auth.FromContext(ctx)
	view := s.b.Store.Read()
	svc := view.Service(req.Msg.Service)
	if svc == nil {
		return nil, api.ToConnect(api.NotFound("service", req.Msg.Service, "corpus service list"))
	}
	g := view.Guest(svc.GuestId)
	if g == nil || g.NodeId != p.NodeID {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("service %s does not run on node %s", svc.Name, p.NodeName))
	}
	k, err := s.b.Keyring().Open(view)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	secrets, err := keyring.OpenSecrets(k, svc.Name, svc.Secrets)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	env := map[string]string{
		"NAME":    svc.Name,
		"VERSION": svc.Version,
		"PORT":    strconv.Itoa(int(svc.TemplateSpec.GetPort())),
		"DATA":    svc.TemplateSpec.GetVolumePath(),
	}
	maps.Copy(env, secrets)
	out := proto.Clone(svc).(*corpusv1.Service)
	out.Secrets = nil
	return connect.NewResponse(&corpusv1.ServiceRuntimeResponse{Service: out, Env: env}), nil
}
