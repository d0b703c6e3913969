// Package auth authenticates API callers and decides what each may call.
//
// Every API request passes through Interceptor. It turns the request's
// credential into a Principal (an operator, a node agent, or anonymous)
// and checks it against the procedure's policy before the handler runs.
// Procedures without a policy are refused, so a new method is closed until
// someone decides who may call it.
//
// Users present bearer tokens (the operator token created when the cluster
// bootstraps, or a user's API token); only SHA-256 hashes are stored.
// Node agents and coordinators present certificates of the cluster CA on
// the TLS connection (PeerHTTP puts the verified identity on the request);
// a node's certificate is accepted while the node is enrolled and the
// certificate is its current (or just replaced) one, so removing a node
// revokes it at once. A coordinator also presents the cluster's
// coordinator key.
package auth

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"corpus/coordinator/state"
	"corpus/internal/clock"
	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
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
	// Replica is a coordinator certificate without the coordinator key:
	// replicas asking each other who they are before the cluster (and
	// its key) exists.
	Replica Kind = "replica"
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
	// CertSerial is the serial of the certificate an agent connected with.
	CertSerial string
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
var Public = Policy{Anonymous, Operator, Agent, Coordinator, Replica, Dev, Viewer}

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
	// Refused, when set, hears of every call a policy or a credential
	// refused (with the request when it is known), for the audit log.
	Refused func(ctx context.Context, p Principal, procedure string, req any, err error)
	// Clock decides whether tokens have expired, with the cluster's time
	// (nil: clock.System; see state.Store.Now).
	Clock clock.Clock
	// Used, when set, hears of every call a user token was accepted for,
	// with the client's address (see coordinator/tokenuse). It must not
	// block.
	Used func(tokenID, addr string)
}

// Authenticate returns the principal for a request's verified peer
// certificate (nil without one) and its Authorization header value.
func (a *Authenticator) Authenticate(peer *pki.Identity, header string) (Principal, error) {
	tok, hasTok := strings.CutPrefix(header, "Bearer ")
	hasTok = hasTok && tok != ""
	view := a.Store.Read()
	if peer != nil {
		switch peer.Role {
		case pki.RoleNode:
			if hasTok {
				return Principal{}, errTwoIdentities
			}
			n := view.Node(peer.ID)
			if n == nil {
				return Principal{}, errNodeGone
			}
			if peer.Serial != n.CertSerial && (peer.Serial != n.PrevCertSerial || n.PrevCertSerial == "") && !renewedSinceRestore(view, n, peer) {
				return Principal{}, errCertReplaced
			}
			return Principal{Kind: Agent, NodeID: n.Id, NodeName: n.Name, CertSerial: peer.Serial}, nil
		case pki.RoleCoordinator:
			if !hasTok {
				return Principal{Kind: Replica}, nil
			}
			key, ok := strings.CutPrefix(tok, rpc.CoordinatorCredentialPrefix)
			want := view.Config().GetCoordinatorKey()
			if !ok || want == "" || !secret.Equal(key, secret.Hash(want)) {
				return Principal{}, errBadCredential
			}
			return Principal{Kind: Coordinator}, nil
		}
		return Principal{}, errBadCredential
	}
	if !hasTok {
		return Principal{Kind: Anonymous}, nil
	}
	if rest, ok := strings.CutPrefix(tok, UserTokenPrefix); ok {
		return userPrincipal(view, rest, a.Store.Now(a.Clock))
	}
	if strings.HasPrefix(tok, rpc.CoordinatorCredentialPrefix) {
		return Principal{}, errNoCertificate
	}
	cfg := view.Config()
	if cfg == nil || !secret.Equal(tok, cfg.OpsTokenHash) {
		return Principal{}, errBadCredential
	}
	return Principal{Kind: Operator}, nil
}

var (
	errTwoIdentities = errors.New("a request carries one identity: a node certificate and a token together are refused")
	errNodeGone      = errors.New("certificate of a node that is no longer enrolled (removed)")
	errCertReplaced  = errors.New("certificate replaced or revoked: the node renewed it, use the current one")
	errNoCertificate = errors.New("coordinators authenticate with their certificate as well as the coordinator key")
)

type peerKey struct{}

// PeerHTTP records the identity of a request's verified client
// certificate for the interceptor. It wraps an API's HTTP handler.
func PeerHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := pki.PeerIdentity(r.TLS); ok {
			r = r.WithContext(context.WithValue(r.Context(), peerKey{}, id))
		}
		h.ServeHTTP(w, r)
	})
}

func peerFrom(ctx context.Context) *pki.Identity {
	if id, ok := ctx.Value(peerKey{}).(pki.Identity); ok {
		return &id
	}
	return nil
}

// userPrincipal resolves "ID_SECRET" of a user token.
func userPrincipal(view *state.Snap, rest string, now time.Time) (Principal, error) {
	id, sec, ok := strings.Cut(rest, "_")
	if !ok {
		return Principal{}, errBadCredential
	}
	t := view.UserToken(id)
	if t == nil || !secret.Equal(sec, t.SecretHash) {
		return Principal{}, errBadCredential
	}
	if t.ExpiresAt != nil && !now.Before(t.ExpiresAt.AsTime()) {
		return Principal{}, errExpired
	}
	u := view.User(t.User)
	if u == nil {
		return Principal{}, errBadCredential
	}
	p := UserPrincipal(u)
	p.TokenID = t.Id
	return p, nil
}

// UserPrincipal is a user as a principal, of the kind its role is: for
// what the user may do whatever credential it showed (a token, or an
// SSH key at a node's git endpoint).
func UserPrincipal(u *corpusv1.User) Principal {
	p := Principal{User: u.Name}
	switch u.Role {
	case corpusv1.RoleOps:
		p.Kind = Operator
	case corpusv1.RoleDev:
		p.Kind = Dev
	default:
		p.Kind = Viewer
	}
	return p
}

var errExpired = errors.New("credential expired: ask for a new token (corpus user token create) and corpus login again")

// authorize authenticates a call and checks its policy; req gives the
// call's request for the audit of a refusal. For a user token the
// returned context ends when the token is revoked or expires, so long
// calls (blocking reads, streams) end with it; cancel releases it.
func (a *Authenticator) authorize(ctx context.Context, procedure string, peer connect.Peer, h http.Header, req func() any) (context.Context, context.CancelFunc, error) {
	policy, ok := a.Policies[procedure]
	if !ok {
		return nil, nil, connect.NewError(connect.CodePermissionDenied, errors.New("procedure "+procedure+" has no access policy"))
	}
	p, err := a.Authenticate(peerFrom(ctx), h.Get("Authorization"))
	if err != nil {
		return nil, nil, a.refuse(ctx, Principal{Kind: Anonymous}, procedure, req, connect.NewError(connect.CodeUnauthenticated, err))
	}
	if !policy.allows(p.Kind) {
		if p.Kind == Anonymous {
			return nil, nil, a.refuse(ctx, p, procedure, req, connect.NewError(connect.CodeUnauthenticated, errNoCredential))
		}
		return nil, nil, a.refuse(ctx, p, procedure, req, connect.NewError(connect.CodePermissionDenied, errors.New(p.String()+" may not call "+procedure)))
	}
	ctx, cancel := context.WithCancelCause(context.WithValue(ctx, principalKey{}, p))
	if p.TokenID != "" {
		if a.Used != nil {
			a.Used(p.TokenID, peer.Addr)
		}
		go a.endWithToken(ctx, cancel, p.TokenID)
	}
	return ctx, func() { cancel(nil) }, nil
}

// refuse tells Refused of a refusal and returns err.
func (a *Authenticator) refuse(ctx context.Context, p Principal, procedure string, req func() any, err error) error {
	if a.Refused != nil {
		a.Refused(ctx, p, procedure, req(), err)
	}
	return err
}

// firstRequest reads the first message of a refused stream, to name
// what it was about (nil when it cannot be read). A server stream's
// request came with the call, as a unary call's does; a client's first
// message is the one every client of these streams sends before it
// reads (a client that holds it back holds its own stream only, as it
// could an allowed one).
func firstRequest(conn connect.StreamingHandlerConn) any {
	md, ok := conn.Spec().Schema.(protoreflect.MethodDescriptor)
	if !ok {
		return nil
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if err != nil {
		return nil
	}
	m := mt.New().Interface()
	if conn.Receive(m) != nil {
		return nil
	}
	return m
}

// errTokenRevoked and errTokenExpired end the open calls of a token
// revoked (or whose user was deleted), or that expired, during them.
var (
	errTokenRevoked = errors.New("token revoked: this call and every other one made with the token end; get another token (corpus user token create, then corpus login)")
	errTokenExpired = errors.New("token expired during the call: get another token (corpus user token create, then corpus login)")
)

// revoked turns the end of a call whose token went away into an
// authentication error, so nothing more is answered with it: a call
// the revoke itself woke (a blocking read of the index) may end before
// endWithToken cancels it, so the state is asked too. A revoke's own
// answer stands: revoking the token it was made with is its success.
func (a *Authenticator) revoked(ctx context.Context, procedure string) error {
	if procedure == corpusv1connect.UserServiceRevokeTokenProcedure {
		return nil
	}
	cause := context.Cause(ctx)
	if errors.Is(cause, errTokenRevoked) || errors.Is(cause, errTokenExpired) {
		return connect.NewError(connect.CodeUnauthenticated, cause)
	}
	if id := FromContext(ctx).TokenID; id != "" {
		if v := a.Store.Read(); v.UserToken(id) == nil {
			return connect.NewError(connect.CodeUnauthenticated, errTokenRevoked)
		}
	}
	return nil
}

// endWithToken cancels a call when its token is revoked or expires.
func (a *Authenticator) endWithToken(ctx context.Context, cancel context.CancelCauseFunc, id string) {
	for ctx.Err() == nil {
		v := a.Store.Read()
		t := v.UserToken(id)
		if t == nil || v.User(t.User) == nil {
			cancel(errTokenRevoked)
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
			cancel(errTokenExpired)
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
		ctx, cancel, err := i.a.authorize(ctx, req.Spec().Procedure, req.Peer(), req.Header(), req.Any)
		if err != nil {
			return nil, err
		}
		defer cancel()
		res, err := next(ctx, req)
		if rerr := i.a.revoked(ctx, req.Spec().Procedure); rerr != nil {
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
		ctx, cancel, err := i.a.authorize(ctx, conn.Spec().Procedure, conn.Peer(), conn.RequestHeader(), func() any { return firstRequest(conn) })
		if err != nil {
			return err
		}
		defer cancel()
		err = next(ctx, conn)
		if rerr := i.a.revoked(ctx, conn.Spec().Procedure); rerr != nil {
			return rerr
		}
		return err
	}
}

// renewedSinceRestore says whether a node's certificate the state does
// not record was issued after the snapshot the cluster was restored from:
// the node renewed it then, and the state went back to the one it
// replaced. It expires later than the recorded one, which a replaced
// (older) certificate never does. The node's next renewal records it.
func renewedSinceRestore(view *state.Snap, n *corpusv1.Node, peer *pki.Identity) bool {
	return view.Config().GetRestore() != nil && n.CertExpiresAt != nil && peer.NotAfter.After(n.CertExpiresAt.AsTime())
}
