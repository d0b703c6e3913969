// Package registries serves RegistryService: the credentials nodes pull
// OCI images from private registries with, set, listed and removed by
// operators, and AgentService.RegistryCredentials, which gives them
// opened to the agents that pull.
package registries

import (
	"context"
	"fmt"
	"strings"
	"unicode"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/api"
	"corpus/coordinator/auth"
	"corpus/coordinator/keyring"
	"corpus/coordinator/state"
	"corpus/internal/imageref"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// New returns the handler of RegistryService.
func New(b *api.Backend) corpusv1connect.RegistryServiceHandler { return &Service{b: b} }

// Service serves RegistryService and the agents' RegistryCredentials.
type Service struct{ b *api.Backend }

// NewCredentials returns the part of AgentService about registries.
func NewCredentials(b *api.Backend) *Credentials { return &Credentials{b: b} }

// Credentials serves AgentService.RegistryCredentials.
type Credentials struct{ b *api.Backend }

// Bounds of what a login holds.
const (
	maxUsernameBytes = 256
	maxPasswordBytes = 8192
)

// checkCredentials refuses what no registry takes: an empty or huge
// value, or control characters (a newline in a header).
func checkCredentials(username, password string) error {
	bad := func(s string) bool { return strings.ContainsFunc(s, unicode.IsControl) }
	switch {
	case username == "":
		return api.Invalidf("no username given (--username; registries that take a token alone take any name with it)")
	case len(username) > maxUsernameBytes || bad(username) || strings.Contains(username, ":"):
		return api.Invalidf("the username has control characters or a ':', or more than %d bytes", maxUsernameBytes)
	case password == "":
		return api.Invalidf("no password or token given (corpus registry login HOST --password-stdin reads it)")
	case len(password) > maxPasswordBytes || bad(password):
		return api.Invalidf("the password has control characters or more than %d bytes", maxPasswordBytes)
	}
	return nil
}

func registryHost(host string) (string, error) {
	h, err := imageref.Registry(host)
	if err != nil {
		return "", api.Invalidf("%v", err)
	}
	return h, nil
}

func view(l *corpusv1.RegistryLogin) *corpusv1.RegistryView {
	return &corpusv1.RegistryView{Host: l.Host, Username: l.Username, SetAt: l.SetAt, SetBy: l.SetBy}
}

func openPassword(b *api.Backend, l *corpusv1.RegistryLogin) (string, error) {
	k, err := b.Keyring().Open(b.Store.Read())
	if err != nil {
		return "", err
	}
	open, err := keyring.OpenSealed(k, map[string][]byte{"password": l.Password}, func(string) string { return state.RegistryPlace(l.Host) })
	if err != nil {
		return "", err
	}
	return open["password"], nil
}

func (s *Service) Login(ctx context.Context, req *connect.Request[corpusv1.RegistryLoginRequest]) (*connect.Response[corpusv1.RegistryLoginResponse], error) {
	m := req.Msg
	host, err := registryHost(m.Host)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	if err := checkCredentials(m.Username, m.Password); err != nil {
		return nil, api.ToConnect(err)
	}
	// The same credentials set again (a retry whose answer was lost)
	// change nothing.
	if cur := s.b.Store.Read().RegistryLogin(host); cur != nil && cur.Username == m.Username {
		if p, err := openPassword(s.b, cur); err == nil && p == m.Password {
			return connect.NewResponse(&corpusv1.RegistryLoginResponse{Registry: view(cur)}), nil
		}
	}
	k, err := s.b.Keyring().Ensure(ctx)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	sealed, err := keyring.SealAll(k, map[string]string{"password": m.Password}, func(string) string { return state.RegistryPlace(host) })
	if err != nil {
		return nil, api.ToConnect(err)
	}
	l := &corpusv1.RegistryLogin{Host: host, Username: m.Username, Password: sealed["password"],
		SetAt: timestamppb.Now(), SetBy: auth.FromContext(ctx).String()}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_PutRegistryLogin{PutRegistryLogin: &corpusv1.PutRegistryLogin{Login: l}}}); err != nil {
		return nil, err
	}
	cur := s.b.Store.Read().RegistryLogin(host)
	if cur == nil {
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("registry %s was logged out meanwhile", host))
	}
	return connect.NewResponse(&corpusv1.RegistryLoginResponse{Registry: view(cur), Changed: true}), nil
}

func (s *Service) ListRegistries(ctx context.Context, req *connect.Request[corpusv1.ListRegistriesRequest]) (*connect.Response[corpusv1.ListRegistriesResponse], error) {
	res := &corpusv1.ListRegistriesResponse{}
	for _, l := range s.b.Store.Read().RegistryLogins() {
		res.Registries = append(res.Registries, view(l))
	}
	return connect.NewResponse(res), nil
}

func (s *Service) Logout(ctx context.Context, req *connect.Request[corpusv1.RegistryLogoutRequest]) (*connect.Response[corpusv1.RegistryLogoutResponse], error) {
	host, err := registryHost(req.Msg.Host)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	res := &corpusv1.RegistryLogoutResponse{Host: host}
	if s.b.Store.Read().RegistryLogin(host) == nil {
		return connect.NewResponse(res), nil
	}
	_, err = s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_DeleteRegistryLogin{DeleteRegistryLogin: &corpusv1.DeleteRegistryLogin{Host: host}}})
	switch {
	case connect.CodeOf(err) == connect.CodeNotFound: // removed meanwhile
	case err != nil:
		return nil, err
	default:
		res.Removed = true
	}
	return connect.NewResponse(res), nil
}

// RegistryCredentials gives an agent a registry's credentials, opened,
// for a pull: when one of its guests runs an image of that registry, or
// it runs a project's guest (corpus deploy --image may name any
// registry). A registry without credentials is found false: the pull
// goes anonymous.
func (a *Credentials) RegistryCredentials(ctx context.Context, req *connect.Request[corpusv1.RegistryCredentialsRequest]) (*connect.Response[corpusv1.RegistryCredentialsResponse], error) {
	p := auth.FromContext(ctx)
	host, err := registryHost(req.Msg.Host)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	v := a.b.Store.Read()
	if !mayPull(v, p.NodeID, host) {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("node %s runs no guest whose image is from registry %s, nor a project's guest", p.NodeName, host))
	}
	l := v.RegistryLogin(host)
	if l == nil {
		return connect.NewResponse(&corpusv1.RegistryCredentialsResponse{}), nil
	}
	pw, err := openPassword(a.b, l)
	if err != nil {
		return nil, api.ToConnect(fmt.Errorf("opening the password of registry %s: %w", host, err))
	}
	return connect.NewResponse(&corpusv1.RegistryCredentialsResponse{Found: true, Username: l.Username, Password: pw}), nil
}

// mayPull reports whether node may pull from registry host: one of its
// guests has an image there, or is a project's. The image of a guest
// whose driver takes any image (no list of images it builds: the
// kubernetes driver) is read as that driver's cluster reads it, Docker
// Hub's short names included.
func mayPull(v *state.Snap, node, host string) bool {
	if node == "" {
		return false
	}
	anyImage := map[string]bool{}
	for _, d := range v.Node(node).GetDrivers() {
		anyImage[d.Name] = len(d.Images) == 0
	}
	projects := v.GuestProjects()
	for _, g := range v.GuestsOnNode(node) {
		if ref, ok := projects[g.Id]; ok && !strings.HasPrefix(ref.Project, "service:") {
			return true
		}
		// A reference names its registry first, as given: only Docker
		// Hub's are spelled otherwise (docker.io, or none). Asked once
		// per guest a node creates, over all of the node's guests: the
		// parse is for the few that can match.
		if host != imageref.DockerHub && !strings.HasPrefix(g.GetSpec().GetImage(), host+"/") {
			continue
		}
		r, err := imageref.Parse(g.GetSpec().GetImage(), false)
		if err != nil && anyImage[g.GetSpec().GetDriver()] {
			r, err = imageref.ParseAny(g.GetSpec().GetImage())
		}
		if err == nil && r.Context().RegistryStr() == host {
			return true
		}
	}
	return false
}
