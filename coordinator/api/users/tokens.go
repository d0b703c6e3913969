package users

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/api"
	"corpus/coordinator/auth"
	"corpus/internal/names"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
)

// Token lifetimes.
const (
	DefaultTokenTTL = 30 * 24 * time.Hour
	maxUserTokenTTL = 366 * 24 * time.Hour
)

// selfOrOps allows operators to act on any user, users on themselves.
func selfOrOps(ctx context.Context, user string) error {
	p := auth.FromContext(ctx)
	if p.Kind == auth.Operator || p.IsUser(user) {
		return nil
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s may only manage its own tokens", p))
}

func (s *userService) CreateToken(ctx context.Context, req *connect.Request[corpusv1.CreateTokenRequest]) (*connect.Response[corpusv1.CreateTokenResponse], error) {
	m := req.Msg
	if err := names.Validate("user", m.User); err != nil {
		return nil, api.ToConnect(err)
	}
	if err := selfOrOps(ctx, m.User); err != nil {
		return nil, err
	}
	if err := api.ValidText("description", m.Description, 200); err != nil {
		return nil, api.ToConnect(err)
	}
	ttl := time.Duration(m.TtlSeconds) * time.Second
	switch {
	case m.TtlSeconds == 0:
		ttl = DefaultTokenTTL
	case m.TtlSeconds == -1:
		ttl = 0
	case m.TtlSeconds < 1 || ttl > maxUserTokenTTL:
		return nil, api.ToConnect(api.Invalidf("ttl %ds: want 1s to %s, or -1 for a token that never expires", m.TtlSeconds, maxUserTokenTTL))
	}
	if s.b.Store.Read().User(m.User) == nil {
		return nil, api.ToConnect(api.NotFound("user", m.User, "corpus user list"))
	}
	t, plain := newUserToken(m.User, m.Description)
	if m.Session {
		// The session ends with the token it was opened with.
		p := auth.FromContext(ctx)
		if p.TokenID == "" || !p.IsUser(m.User) {
			return nil, api.ToConnect(api.Invalidf("a session token is made with a token of its user, %s", m.User))
		}
		t.Parent = p.TokenID
	}
	if ttl > 0 {
		t.ExpiresAt = timestamppb.New(s.b.Now().Add(ttl))
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_CreateUserToken{CreateUserToken: &corpusv1.CreateUserToken{Token: t}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.CreateTokenResponse{Token: plain, Info: s.tokenInfo(t.Id)}), nil
}

// newUserToken makes a token of user with a fresh id and secret; plain
// is the credential (cusr_ID_SECRET), shown once.
func newUserToken(user, description string) (t *corpusv1.UserToken, plain string) {
	id, sec := secret.Hex(8), secret.Hex(24)
	t = &corpusv1.UserToken{Id: id, User: user, SecretHash: secret.Hash(sec), Description: description}
	return t, auth.UserTokenPrefix + id + "_" + sec
}

// tokenInfo is the stored token id without its hash.
func (s *userService) tokenInfo(id string) *corpusv1.UserToken {
	info := proto.Clone(s.b.Store.Read().UserToken(id)).(*corpusv1.UserToken)
	info.SecretHash = ""
	return info
}

func (s *userService) ListTokens(ctx context.Context, req *connect.Request[corpusv1.ListTokensRequest]) (*connect.Response[corpusv1.ListTokensResponse], error) {
	user := req.Msg.User
	p := auth.FromContext(ctx)
	if user == "" && p.Kind != auth.Operator {
		user = p.User
	}
	if user != "" {
		if err := selfOrOps(ctx, user); err != nil {
			return nil, err
		}
	}
	res := &corpusv1.ListTokensResponse{}
	for _, t := range s.b.Store.Read().UserTokens(user) {
		t = proto.Clone(t).(*corpusv1.UserToken)
		t.SecretHash = ""
		res.Tokens = append(res.Tokens, t)
	}
	return connect.NewResponse(res), nil
}

func (s *userService) RevokeToken(ctx context.Context, req *connect.Request[corpusv1.RevokeTokenRequest]) (*connect.Response[corpusv1.RevokeTokenResponse], error) {
	if err := api.ValidID("token", req.Msg.Id, "corpus user token list"); err != nil {
		return nil, api.ToConnect(err)
	}
	t := s.b.Store.Read().UserToken(req.Msg.Id)
	if t == nil {
		return nil, api.ToConnect(api.NotFound("token", req.Msg.Id, "corpus user token list"))
	}
	if err := selfOrOps(ctx, t.User); err != nil {
		return nil, err
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_RevokeUserToken{RevokeUserToken: &corpusv1.RevokeUserToken{Id: t.Id}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.RevokeTokenResponse{}), nil
}
