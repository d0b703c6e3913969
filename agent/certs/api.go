package certs

import (
	"context"

	"net"

	"connectrpc.com/connect"

	corpusv1 "corpus/proto/corpus/v1"
)

// Listener is where the node's proxy listens (agent/network).
type Listener interface {
	HTTPAddr() net.Addr
	HTTPSAddr() net.Addr
}

// Challenges serves the CheckChallenge procedure of the agent's API; the caller
// is checked before.
type Challenges struct {
	// Proxy is the node's proxy, nil when the node runs none.
	Proxy Listener
	// Node is this node's name.
	Node string
}

// CheckChallenge asks the node's proxy for a challenge's answer, as the
// CA will.
func (s Challenges) CheckChallenge(ctx context.Context, req *connect.Request[corpusv1.CheckChallengeRequest]) (*connect.Response[corpusv1.CheckChallengeResponse], error) {
	if s.Proxy == nil {
		return connect.NewResponse(&corpusv1.CheckChallengeResponse{Detail: "node " + s.Node + " runs no proxy"}), nil
	}
	ok, detail := Check(ctx, s.Proxy.HTTPAddr(), s.Proxy.HTTPSAddr(), req.Msg)
	return connect.NewResponse(&corpusv1.CheckChallengeResponse{Ready: ok, Detail: detail}), nil
}
