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
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
)

// Kind is the kind of caller.
type Kind string

// Caller kinds.
const (
	Anonymous Kind = "anonymous"
	Operator  Kind = "ops"
	Agent     Kind = "node"
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
var Public = Policy{Anonymous, Operator, Agent}

func (p Policy) allows(k Kind) bool {
	for _, a := range p {
		if a == k {
			return true
		}
	}
	return false
}

// Hash returns the hex SHA-256 of a secret, the form secrets are stored in.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Equal compares a secret with a stored hash in constant time.
func Equal(secret, hash string) bool {
	return subtle.ConstantTimeCompare([]byte(Hash(secret)), []byte(hash)) == 1
}

// NodeCredential is the bearer token form of an agent's credential.
func NodeCredential(nodeID, secret string) string {
	return "node." + nodeID + "." + secret
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
	if rest, ok := strings.CutPrefix(tok, "node."); ok {
		id, secret, ok := strings.Cut(rest, ".")
		if !ok {
			return Principal{}, errBadCredential
		}
		n := view.Node(id)
		if n == nil || !Equal(secret, n.SecretHash) {
			return Principal{}, errBadCredential
		}
		return Principal{Kind: Agent, NodeID: n.Id, NodeName: n.Name}, nil
	}
	cfg := view.Config()
	if cfg == nil || !Equal(tok, cfg.OpsTokenHash) {
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
