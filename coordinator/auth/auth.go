// Package auth authenticates API callers and decides what each may call.
//
// Every API request passes through Interceptor. It turns the request's
// credential into a Principal (an operator, a node agent, or anonymous)
// and checks it against the procedure's policy before the handler runs.
// Procedures without a policy are refused, so a new method is closed until
// someone decides who may call it.
//
// Credentials today are bearer tokens: the operator token created when the
// cluster bootstraps, and the per-node secret an agent receives when it
// enrolls ("node.<id>.<secret>"). Only SHA-256 hashes of either are stored.
package auth

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	"corpus/internal/rpc"
	"corpus/internal/secret"
)

// Kind is the kind of caller.
type Kind string

// Caller kinds.
const (
	Anonymous Kind = "anonymous"
	Operator  Kind = "ops"
	Agent     Kind = "node"
	// Coordinator is another replica of the control plane.
	Coordinator Kind = "coordinator"
)

// Principal is who is calling.
type Principal struct {
	Kind Kind
	// NodeID and NodeName are set for agents.
	NodeID   string
	NodeName string
}

// String names the principal for logs and the audit trail.
func (p Principal) String() string {
	if p.Kind == Agent {
		return "node:" + p.NodeName
	}
	return string(p.Kind)
}

type principalKey struct{}

// FromContext returns the principal the interceptor attached.
func FromContext(ctx context.Context) Principal {
	p, ok := ctx.Value(principalKey{}).(Principal)
	if !ok {
		return Principal{Kind: Anonymous}
	}
	return p
}

// Policy lists the kinds allowed to call one procedure.
type Policy []Kind

// Public is the policy of a procedure anyone may call; the handler
// checks the credential in the request itself (enrollment tokens).
var Public = Policy{Anonymous, Operator, Agent, Coordinator}

func (p Policy) allows(k Kind) bool {
	for _, a := range p {
		if a == k {
			return true
		}
	}
	return false
}

var (
	errNoCredential  = errors.New("no credential: run `corpus dev` or `corpus login`, or pass --token / CORPUS_TOKEN")
	errBadCredential = errors.New("credential not accepted: the token is wrong, revoked or from another cluster")
)

// Authenticator resolves credentials against the replicated state.
type Authenticator struct {
	Store    *state.Store
	Policies map[string]Policy
}

// Authenticate returns the principal for an Authorization header value.
func (a *Authenticator) Authenticate(header string) (Principal, error) {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || tok == "" {
		return Principal{Kind: Anonymous}, nil
	}
	view := a.Store.Read()
	if key, ok := strings.CutPrefix(tok, rpc.CoordinatorCredentialPrefix); ok {
		want := view.Config().GetCoordinatorKey()
		if want == "" || !secret.Equal(key, secret.Hash(want)) {
			return Principal{}, errBadCredential
		}
		return Principal{Kind: Coordinator}, nil
	}
	if rest, ok := strings.CutPrefix(tok, rpc.NodeCredentialPrefix); ok {
		id, nodeSecret, ok := strings.Cut(rest, ".")
		if !ok {
			return Principal{}, errBadCredential
		}
		n := view.Node(id)
		if n == nil || !secret.Equal(nodeSecret, n.SecretHash) {
			return Principal{}, errBadCredential
		}
		return Principal{Kind: Agent, NodeID: n.Id, NodeName: n.Name}, nil
	}
	cfg := view.Config()
	if cfg == nil || !secret.Equal(tok, cfg.OpsTokenHash) {
		return Principal{}, errBadCredential
	}
	return Principal{Kind: Operator}, nil
}

func (a *Authenticator) authorize(ctx context.Context, procedure string, h http.Header) (context.Context, error) {
	policy, ok := a.Policies[procedure]
	if !ok {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("procedure "+procedure+" has no access policy"))
	}
	p, err := a.Authenticate(h.Get("Authorization"))
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	if !policy.allows(p.Kind) {
		if p.Kind == Anonymous {
			return nil, connect.NewError(connect.CodeUnauthenticated, errNoCredential)
		}
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New(p.String()+" may not call "+procedure))
	}
	return context.WithValue(ctx, principalKey{}, p), nil
}

// Interceptor returns the connect interceptor enforcing the policies.
func (a *Authenticator) Interceptor() connect.Interceptor { return interceptor{a} }

type interceptor struct{ a *Authenticator }

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		ctx, err := i.a.authorize(ctx, req.Spec().Procedure, req.Header())
		if err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (i interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := i.a.authorize(ctx, conn.Spec().Procedure, conn.RequestHeader())
		if err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
