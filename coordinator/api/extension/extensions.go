// Package extension serves ExtensionService: the operators' extensions
// registered, listed, disabled and removed.
package extension

import (
	"context"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/api"
	"corpus/coordinator/compat"
	"corpus/coordinator/extensions"
	"corpus/coordinator/keyring"
	"corpus/coordinator/state"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// New returns the handler of ExtensionService.
func New(b *api.Backend) corpusv1connect.ExtensionServiceHandler { return &extensionService{b} }

type extensionService struct{ b *api.Backend }

// maxSecretBytes bounds an extension's shared secret.
const maxSecretBytes = 1024

func (s *extensionService) AddExtension(ctx context.Context, req *connect.Request[corpusv1.AddExtensionRequest]) (*connect.Response[corpusv1.AddExtensionResponse], error) {
	if req.Msg.Extension == nil {
		return nil, api.ToConnect(api.Invalidf("no extension given"))
	}
	e := proto.Clone(req.Msg.Extension).(*corpusv1.Extension)
	e.Disabled, e.Secret, e.CreateIndex, e.ModifyIndex = false, nil, 0, 0
	e.CreatedAt = timestamppb.Now()
	if err := extensions.Check(e); err != nil {
		return nil, api.ToConnect(api.Invalidf("%v", err))
	}
	view := s.b.Store.Read()
	if slices.Contains(e.On, corpusv1.OnImageDeploy) {
		if err := compat.Check(view.ClusterVersion(), compat.ImageDeployAdmission); err != nil {
			return nil, api.ToConnect(err)
		}
	}
	if cur := view.Extension(e.Name); cur != nil {
		if !req.Msg.Replace {
			// The same extension added again (a retry whose first answer
			// was lost) is done already.
			if s.sameExtension(view, cur, e, req.Msg.Secret) {
				return connect.NewResponse(&corpusv1.AddExtensionResponse{Extension: extensionView(view.Extensions(), cur)}), nil
			}
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("extension %s exists with other settings; delete it first or add it again with --replace", e.Name))
		}
		e.Disabled = cur.Disabled
	}
	others := slices.DeleteFunc(view.Extensions(), func(o *corpusv1.Extension) bool { return o.Name == e.Name })
	if _, err := extensions.Order(append(others, e)); err != nil {
		return nil, api.ToConnect(api.Invalidf("adding %s: %v", e.Name, err))
	}
	if sec := req.Msg.Secret; sec != "" {
		if len(sec) < 16 || len(sec) > maxSecretBytes {
			return nil, api.ToConnect(api.Invalidf("the shared secret has %d bytes; want 16 to %d", len(sec), maxSecretBytes))
		}
		k, err := s.b.Keyring().Ensure(ctx)
		if err != nil {
			return nil, api.ToConnect(err)
		}
		sealed, err := keyring.SealAll(k, map[string]string{"secret": sec}, func(string) string { return state.ExtensionPlace(e.Name) })
		if err != nil {
			return nil, api.ToConnect(err)
		}
		e.Secret = sealed["secret"]
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_PutExtension{PutExtension: &corpusv1.PutExtension{Extension: e, Replace: req.Msg.Replace}}}); err != nil {
		return nil, err
	}
	v := s.b.Store.Read()
	return connect.NewResponse(&corpusv1.AddExtensionResponse{Extension: extensionView(v.Extensions(), v.Extension(e.Name))}), nil
}

// sameExtension says whether cur, as stored, is e with secret: an add
// asked again.
func (s *extensionService) sameExtension(view *state.Snap, cur, e *corpusv1.Extension, secret string) bool {
	a, b := proto.CloneOf(cur), proto.CloneOf(e)
	for _, x := range []*corpusv1.Extension{a, b} {
		x.Disabled, x.Secret, x.CreateIndex, x.ModifyIndex, x.CreatedAt = false, nil, 0, 0, nil
	}
	if !proto.Equal(a, b) || (len(cur.Secret) > 0) != (secret != "") {
		return false
	}
	if secret == "" {
		return true
	}
	k, err := s.b.Keyring().Open(view)
	if err != nil {
		return false
	}
	open, err := keyring.OpenSealed(k, map[string][]byte{"secret": cur.Secret}, func(string) string { return state.ExtensionPlace(cur.Name) })
	return err == nil && open["secret"] == secret
}

// extensionView shows an extension without its secret, with its place
// in the call order among those of its kind.
func extensionView(all []*corpusv1.Extension, e *corpusv1.Extension) *corpusv1.ExtensionView {
	if e == nil {
		return nil
	}
	out := proto.Clone(e).(*corpusv1.Extension)
	out.Secret = nil
	v := &corpusv1.ExtensionView{Extension: out, Signed: len(e.Secret) > 0}
	ordered, err := extensions.Order(all)
	if err != nil {
		return v
	}
	n := int32(0)
	for _, o := range ordered {
		if o.Kind == e.Kind {
			n++
			if o.Name == e.Name {
				v.Order = n
			}
		}
	}
	return v
}

func (s *extensionService) ListExtensions(ctx context.Context, _ *connect.Request[corpusv1.ListExtensionsRequest]) (*connect.Response[corpusv1.ListExtensionsResponse], error) {
	all := s.b.Store.Read().Extensions()
	ordered, err := extensions.Order(all)
	if err != nil {
		ordered = all
	}
	res := &corpusv1.ListExtensionsResponse{}
	for _, kind := range []string{corpusv1.ExtensionMutate, corpusv1.ExtensionValidate, corpusv1.ExtensionLint} {
		for _, e := range ordered {
			if e.Kind == kind {
				res.Extensions = append(res.Extensions, extensionView(all, e))
			}
		}
	}
	return connect.NewResponse(res), nil
}

func (s *extensionService) find(name string) (*corpusv1.Extension, error) {
	if err := names.Validate("extension", name); err != nil {
		return nil, api.ToConnect(err)
	}
	e := s.b.Store.Read().Extension(name)
	if e == nil {
		return nil, api.ToConnect(api.NotFound("extension", name, "corpus extension list"))
	}
	return e, nil
}

func (s *extensionService) GetExtension(ctx context.Context, req *connect.Request[corpusv1.GetExtensionRequest]) (*connect.Response[corpusv1.GetExtensionResponse], error) {
	e, err := s.find(req.Msg.Name)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.GetExtensionResponse{Extension: extensionView(s.b.Store.Read().Extensions(), e)}), nil
}

func (s *extensionService) SetExtensionDisabled(ctx context.Context, req *connect.Request[corpusv1.SetExtensionDisabledRequest]) (*connect.Response[corpusv1.SetExtensionDisabledResponse], error) {
	e, err := s.find(req.Msg.Name)
	if err != nil {
		return nil, err
	}
	if e.Disabled != req.Msg.Disabled {
		e = proto.Clone(e).(*corpusv1.Extension)
		e.Disabled = req.Msg.Disabled
		if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_PutExtension{PutExtension: &corpusv1.PutExtension{Extension: e, Replace: true}}}); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(&corpusv1.SetExtensionDisabledResponse{}), nil
}

func (s *extensionService) DeleteExtension(ctx context.Context, req *connect.Request[corpusv1.DeleteExtensionRequest]) (*connect.Response[corpusv1.DeleteExtensionResponse], error) {
	if _, err := s.find(req.Msg.Name); err != nil {
		return nil, err
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_DeleteExtension{DeleteExtension: &corpusv1.DeleteExtension{Name: req.Msg.Name}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.DeleteExtensionResponse{}), nil
}
