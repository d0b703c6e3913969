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
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	"corpus/internal/rpc"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
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
	// Dev and Viewer are users of those roles; users of role ops are
	// Operators.
	Dev    Kind = "dev"
	Viewer Kind = "viewer"
)

// UserTokenPrefix starts every user's API token: cusr_ID_SECRET.
const UserTokenPrefix = "cusr_"

// Principal is who is calling.
type Principal struct {
	Kind Kind
	// NodeID and NodeName are set for agents.
	NodeID   string
	NodeName string
	// User and TokenID are set for users (Kind Operator, Dev or Viewer).
	User    string
	TokenID string
}

// String names the principal for logs and the audit trail.
func (p Principal) String() string {
	switch {
	case p.Kind == Agent:
		return "node:" + p.NodeName
	case p.User != "":
		return "user:" + p.User
	}
	return string(p.Kind)
}

// IsUser reports whether the principal is a user of the given name.
func (p Principal) IsUser(name string) bool { return p.User != "" && p.User == name }

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
var Public = Policy{Anonymous, Operator, Agent, Coordinator, Dev, Viewer}

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
	if rest, ok := strings.CutPrefix(tok, UserTokenPrefix); ok {
		return userPrincipal(view, rest)
	}
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

// userPrincipal resolves "ID_SECRET" of a user token.
func userPrincipal(view *state.Snap, rest string) (Principal, error) {
	id, sec, ok := strings.Cut(rest, "_")
	if !ok {
		return Principal{}, errBadCredential
	}
	t := view.UserToken(id)
	if t == nil || !secret.Equal(sec, t.SecretHash) {
		return Principal{}, errBadCredential
	}
	if t.ExpiresAt != nil && !time.Now().Before(t.ExpiresAt.AsTime()) {
		return Principal{}, errExpired
	}
	u := view.User(t.User)
	if u == nil {
		return Principal{}, errBadCredential
	}
	p := Principal{User: u.Name, TokenID: t.Id}
	switch u.Role {
	case corpusv1.RoleOps:
		p.Kind = Operator
	case corpusv1.RoleDev:
		p.Kind = Dev
	default:
		p.Kind = Viewer
	}
	return p, nil
}

var errExpired = errors.New("credential expired: ask for a new token (corpus user token create) and corpus login again")

// authorize authenticates a call and checks its policy. For a user token
// the returned context ends when the token is revoked or expires, so
// long calls (blocking reads, streams) end with it; cancel releases it.
func (a *Authenticator) authorize(ctx context.Context, procedure string, h http.Header) (context.Context, context.CancelFunc, error) {
	policy, ok := a.Policies[procedure]
	if !ok {
		return nil, nil, connect.NewError(connect.CodePermissionDenied, errors.New("procedure "+procedure+" has no access policy"))
	}
	p, err := a.Authenticate(h.Get("Authorization"))
	if err != nil {
		return nil, nil, connect.NewError(connect.CodeUnauthenticated, err)
	}
	if !policy.allows(p.Kind) {
		if p.Kind == Anonymous {
			return nil, nil, connect.NewError(connect.CodeUnauthenticated, errNoCredential)
		}
		return nil, nil, connect.NewError(connect.CodePermissionDenied, errors.New(p.String()+" may not call "+procedure))
	}
	ctx, cancel := context.WithCancelCause(context.WithValue(ctx, principalKey{}, p))
	if p.TokenID != "" {
		go a.endWithToken(ctx, cancel, p.TokenID)
	}
	return ctx, func() { cancel(nil) }, nil
}

// errRevoked ends the calls of a token revoked (or expired) meanwhile.
var errRevoked = errors.New("credential revoked or expired during the call")

// revoked turns the end of a call whose token went away into an
// authentication error, so nothing more is answered with it.
func revoked(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), errRevoked) {
		return connect.NewError(connect.CodeUnauthenticated, errRevoked)
	}
	return nil
}

// endWithToken cancels a call when its token is revoked or expires.
func (a *Authenticator) endWithToken(ctx context.Context, cancel context.CancelCauseFunc, id string) {
	for ctx.Err() == nil {
		v := a.Store.Read()
		t := v.UserToken(id)
		if t == nil || v.User(t.User) == nil {
			cancel(errRevoked)
			return
		}
		wctx, wcancel := context.WithCancel(ctx)
		if t.ExpiresAt != nil {
			wctx, wcancel = context.WithDeadline(ctx, t.ExpiresAt.AsTime())
		}
		v.Wait(wctx)
		expired := wctx.Err() == context.DeadlineExceeded
		wcancel()
		if expired {
			cancel(errRevoked)
			return
		}
	}
}

// Interceptor returns the connect interceptor enforcing the policies.
func (a *Authenticator) Interceptor() connect.Interceptor { return interceptor{a} }

type interceptor struct{ a *Authenticator }

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		ctx, cancel, err := i.a.authorize(ctx, req.Spec().Procedure, req.Header())
		if err != nil {
			return nil, err
		}
		defer cancel()
		res, err := next(ctx, req)
		if rerr := revoked(ctx); rerr != nil {
			return nil, rerr
		}
		return res, err
	}
}

func (i interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, cancel, err := i.a.authorize(ctx, conn.Spec().Procedure, conn.RequestHeader())
		if err != nil {
			return err
		}
		defer cancel()
		err = next(ctx, conn)
		if rerr := revoked(ctx); rerr != nil {
			return rerr
		}
		return err
	}
}
