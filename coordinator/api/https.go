package api

import (
	"context"

	"connectrpc.com/connect"

	"corpus/coordinator/acme"
	corpusv1 "corpus/proto/corpus/v1"
)

// HTTPS of http routes: the routes' TLS settings and the ACME account
// are coordinator/api/routes, what agents' proxies serve
// coordinator/api/agents. The orderer itself is coordinator/acme; the
// leader runs it (CertificateLoop).

// CertificateLoop orders and renews the certificates of https routes
// while ctx lasts; the leader runs it.
func (b *Backend) CertificateLoop(ctx context.Context) {
	acme.Run(ctx, acme.Deps{
		Read: b.Store.Read,
		Propose: func(ctx context.Context, cmd *corpusv1.Command) (uint64, error) {
			cmd.Actor = "acme"
			return b.Propose(ctx, cmd)
		},
		Keyring: b.keyrings.Ensure,
		Check: func(ctx context.Context, node *corpusv1.Node, req *corpusv1.CheckChallengeRequest) (*corpusv1.CheckChallengeResponse, error) {
			res, err := b.AgentClient(node).CheckChallenge(ctx, connect.NewRequest(req))
			if err != nil {
				return nil, err
			}
			return res.Msg, nil
		},
		Logger: b.Logger.With("component", "acme"),
	})
}
