package agent

import (
	"context"

	"connectrpc.com/connect"

	"corpus/agent/certs"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// fetchTLS asks a coordinator for the TLS material of domains.
func (a *Agent) fetchTLS(ctx context.Context, domains []string) ([]*corpusv1.TlsDomain, error) {
	var out []*corpusv1.TlsDomain
	err := a.callCoordinator(func(c corpusv1connect.AgentServiceClient) error {
		res, err := c.TlsMaterial(ctx, connect.NewRequest(&corpusv1.TlsMaterialRequest{Domains: domains}))
		if err == nil {
			out = res.Msg.Domains
		}
		return err
	})
	return out, err
}

// CheckChallenge asks the node's proxy for a challenge's answer, as the
// CA will.
func (s *agentAPI) CheckChallenge(ctx context.Context, req *connect.Request[corpusv1.CheckChallengeRequest]) (*connect.Response[corpusv1.CheckChallengeResponse], error) {
	a := s.a
	if err := a.checkCaller(req.Header()); err != nil {
		return nil, err
	}
	if a.net == nil || a.net.Proxy() == nil {
		return connect.NewResponse(&corpusv1.CheckChallengeResponse{Detail: "node " + a.id.NodeName + " runs no proxy"}), nil
	}
	ok, detail := certs.Check(ctx, a.net.Proxy().HTTPAddr(), a.net.Proxy().HTTPSAddr(), req.Msg)
	return connect.NewResponse(&corpusv1.CheckChallengeResponse{Ready: ok, Detail: detail}), nil
}
