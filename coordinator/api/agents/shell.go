package agents

import (
	"context"
	"fmt"

	"corpus/coordinator/api"

	"connectrpc.com/connect"

	"corpus/coordinator/auth"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// RecordShell records a shell session opened over a node's SSH endpoint,
// as the user whose key opened it.
func (s *Service) RecordShell(ctx context.Context, req *connect.Request[corpusv1.RecordShellRequest]) (*connect.Response[corpusv1.RecordShellResponse], error) {
	m := req.Msg
	if err := names.Validate("guest", m.Guest); err != nil {
		return nil, api.ToConnect(err)
	}
	if len(m.Result) > 512 {
		return nil, api.ToConnect(api.Invalidf("result of %d bytes; the limit is 512", len(m.Result)))
	}
	u := s.b.Store.Read().UserByFingerprint(m.Fingerprint)
	if u == nil {
		return nil, api.ToConnect(api.Invalidf("key %.80s belongs to no user", m.Fingerprint))
	}
	actor := fmt.Sprintf("user:%s (ssh via node %s)", u.Name, auth.FromContext(ctx).NodeID)
	if err := s.b.Audit().Record(ctx, actor, "shell_guest", m.Guest, m.Result); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&corpusv1.RecordShellResponse{}), nil
}
