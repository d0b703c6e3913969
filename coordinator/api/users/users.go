// Package users serves UserService: users, their SSH keys and API
// tokens, and password login.
package users

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"golang.org/x/crypto/ssh"

	"corpus/coordinator/api"
	"corpus/coordinator/state"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// New returns the handler of UserService.
func New(b *api.Backend) corpusv1connect.UserServiceHandler {
	return &userService{b: b, limiter: newLoginLimiter()}
}

type userService struct {
	b       *api.Backend
	limiter *loginLimiter
}

func (s *userService) CreateUser(ctx context.Context, req *connect.Request[corpusv1.CreateUserRequest]) (*connect.Response[corpusv1.CreateUserResponse], error) {
	m := req.Msg
	if err := names.Validate("user", m.Name); err != nil {
		return nil, api.ToConnect(err)
	}
	if m.Role == "" {
		m.Role = corpusv1.RoleDev
	}
	switch m.Role {
	case corpusv1.RoleOps, corpusv1.RoleDev, corpusv1.RoleViewer:
	default:
		return nil, api.ToConnect(api.Invalidf("role %q: use ops, dev or viewer", m.Role))
	}
	if m.Auth != "" && m.Auth != corpusv1.AuthLDAP {
		return nil, api.ToConnect(api.Invalidf("auth %q: use ldap, or leave it empty for API tokens only", m.Auth))
	}
	_, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_CreateUser{CreateUser: &corpusv1.CreateUser{User: &corpusv1.User{Name: m.Name, Role: m.Role, Auth: m.Auth}}}})
	if errors.Is(err, state.ErrExists) {
		if u := s.b.Store.Read().User(m.Name); u != nil && u.Role == m.Role && u.Auth == m.Auth {
			return connect.NewResponse(&corpusv1.CreateUserResponse{User: u}), nil
		}
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("user %q already exists with another role or auth", m.Name))
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.CreateUserResponse{User: s.b.Store.Read().User(m.Name), Created: true}), nil
}

func (s *userService) ListUsers(ctx context.Context, _ *connect.Request[corpusv1.ListUsersRequest]) (*connect.Response[corpusv1.ListUsersResponse], error) {
	return connect.NewResponse(&corpusv1.ListUsersResponse{Users: s.b.Store.Read().Users()}), nil
}

func (s *userService) DeleteUser(ctx context.Context, req *connect.Request[corpusv1.DeleteUserRequest]) (*connect.Response[corpusv1.DeleteUserResponse], error) {
	if err := names.Validate("user", req.Msg.Name); err != nil {
		return nil, api.ToConnect(err)
	}
	u := s.b.Store.Read().User(req.Msg.Name)
	if u == nil {
		return nil, api.ToConnect(api.NotFound("user", req.Msg.Name, "corpus user list"))
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_DeleteUser{DeleteUser: &corpusv1.DeleteUser{Name: u.Name}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.DeleteUserResponse{User: u}), nil
}

// maxKeyBytes bounds one public key line.
const maxKeyBytes = 16 << 10

// ParseSSHKey parses one authorized_keys line into the stored form.
func ParseSSHKey(line string) (*corpusv1.SshKey, error) {
	if len(line) > maxKeyBytes {
		return nil, api.Invalidf("public key of %d bytes is over the %d byte limit", len(line), maxKeyBytes)
	}
	pub, comment, opts, rest, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return nil, api.Invalidf("not an SSH public key (%v); give the .pub file, e.g. ~/.ssh/id_ed25519.pub", err)
	}
	if len(opts) > 0 {
		return nil, api.Invalidf("authorized_keys options (%s) are not accepted", strings.Join(opts, ","))
	}
	if len(strings.TrimSpace(string(rest))) > 0 {
		return nil, api.Invalidf("one key per call")
	}
	if strings.ContainsFunc(comment, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		comment = ""
	}
	return &corpusv1.SshKey{
		Fingerprint: ssh.FingerprintSHA256(pub),
		PublicKey:   strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub))),
		Comment:     comment,
	}, nil
}

func (s *userService) AddKey(ctx context.Context, req *connect.Request[corpusv1.AddKeyRequest]) (*connect.Response[corpusv1.AddKeyResponse], error) {
	m := req.Msg
	if err := names.Validate("user", m.User); err != nil {
		return nil, api.ToConnect(err)
	}
	k, err := ParseSSHKey(m.PublicKey)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	view := s.b.Store.Read()
	if view.User(m.User) == nil {
		return nil, api.ToConnect(api.NotFound("user", m.User, "corpus user list"))
	}
	if owner := view.UserByFingerprint(k.Fingerprint); owner != nil {
		if owner.Name == m.User {
			return connect.NewResponse(&corpusv1.AddKeyResponse{Key: k}), nil
		}
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("key %s already belongs to user %s", k.Fingerprint, owner.Name))
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_AddSshKey{AddSshKey: &corpusv1.AddSshKey{User: m.User, Key: k}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.AddKeyResponse{Key: k, Created: true}), nil
}

func (s *userService) DeleteKey(ctx context.Context, req *connect.Request[corpusv1.DeleteKeyRequest]) (*connect.Response[corpusv1.DeleteKeyResponse], error) {
	m := req.Msg
	if err := names.Validate("user", m.User); err != nil {
		return nil, api.ToConnect(err)
	}
	if !api.FingerprintRE.MatchString(m.Fingerprint) {
		return nil, api.ToConnect(api.Invalidf("fingerprint %.80q: want SHA256:... as `corpus key list` shows it", m.Fingerprint))
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_DeleteSshKey{DeleteSshKey: &corpusv1.DeleteSshKey{User: m.User, Fingerprint: m.Fingerprint}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.DeleteKeyResponse{}), nil
}
