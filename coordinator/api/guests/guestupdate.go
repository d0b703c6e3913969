package guests

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/api"
	"corpus/coordinator/state"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// UpdateGuest changes the image, limits, env or ports of a guest. The new
// spec is checked as CreateGuest checks one; bad input changes nothing.
// The same values again answer changed=false. A guest placed on a node
// whose driver cannot apply the change in place (DriverInfo.Converge) is
// refused with FailedPrecondition, and so is one being deleted.
func (s *guestService) UpdateGuest(ctx context.Context, req *connect.Request[corpusv1.UpdateGuestRequest]) (*connect.Response[corpusv1.GuestActionResponse], error) {
	m := req.Msg
	if err := names.Validate("guest", m.Name); err != nil {
		return nil, api.ToConnect(err)
	}
	if m.MemoryBytes != nil && *m.MemoryBytes == 0 {
		return nil, api.ToConnect(api.Invalidf("memory 0: give a size such as 512M"))
	}
	if m.CpuMillis != nil && *m.CpuMillis == 0 {
		return nil, api.ToConnect(api.Invalidf("cpu 0: give cores such as 0.5 or millicores such as 250m"))
	}
	if m.Image != nil && *m.Image == "" {
		return nil, api.ToConnect(api.Invalidf("an empty image: give one such as registry.example/app:1.2"))
	}
	if !m.ReplacePorts && len(m.Ports) > 0 {
		return nil, api.ToConnect(api.Invalidf("ports are given as the whole new list: set replace_ports"))
	}
	for _, k := range m.UnsetEnv {
		if !names.EnvVar(k) || len(k) > api.MaxEnvNameBytes {
			return nil, api.ToConnect(api.Invalidf("environment variable name %.80q must match [A-Za-z_][A-Za-z0-9_]* and be at most %d bytes", k, api.MaxEnvNameBytes))
		}
		if _, set := m.SetEnv[k]; set {
			return nil, api.ToConnect(api.Invalidf("environment variable %s is both set and unset", k))
		}
	}
	view := s.b.Store.Read()
	g := view.GuestByName(m.Name)
	if g == nil {
		return nil, api.ToConnect(api.NotFound("guest", m.Name, "corpus guest list"))
	}
	spec := proto.Clone(g.GetSpec()).(*corpusv1.GuestSpec)
	if spec.Resources == nil {
		spec.Resources = &corpusv1.Resources{}
	}
	if m.Image != nil {
		spec.Image = *m.Image
	}
	if m.MemoryBytes != nil {
		spec.Resources.MemoryBytes = *m.MemoryBytes
	}
	if m.CpuMillis != nil {
		spec.Resources.CpuMillis = *m.CpuMillis
	}
	if len(m.SetEnv) > 0 && spec.Env == nil {
		spec.Env = map[string]string{}
	}
	for k, v := range m.SetEnv {
		spec.Env[k] = v
	}
	for _, k := range m.UnsetEnv {
		delete(spec.Env, k)
	}
	if len(spec.Env) == 0 {
		spec.Env = nil
	}
	if m.ReplacePorts {
		spec.Ports = nil
		for _, p := range m.Ports {
			spec.Ports = append(spec.Ports, proto.Clone(p).(*corpusv1.Port))
		}
	}
	if err := s.normalizeSpec(spec); err != nil {
		return nil, api.ToConnect(err)
	}
	// Extensions see the guest as it would be, and may change it.
	upd := &corpusv1.UpdateGuest{Name: g.Name, Spec: spec}
	admitted, err := s.b.Admission().Admit(ctx, corpusv1.OnGuestUpdate, upd, func() error {
		if upd.Name != g.Name {
			return api.Invalidf("the guest's name cannot change (%s, not %s)", upd.Name, g.Name)
		}
		if upd.Spec == nil {
			return api.Invalidf("no spec")
		}
		return s.normalizeSpec(upd.Spec)
	})
	if err != nil {
		return nil, err
	}
	spec = upd.Spec
	if proto.Equal(g.GetSpec(), spec) {
		return connect.NewResponse(&corpusv1.GuestActionResponse{Guest: g, Changed: false}), nil
	}
	if g.DesiredState == state.DesiredDeleted {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("guest %q is being deleted; create it again under a new name", g.Name))
	}
	_, err = s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_UpdateGuest{UpdateGuest: &corpusv1.UpdateGuest{Name: g.Name, Spec: spec, Admission: admitted}}})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.GuestActionResponse{Guest: s.b.Store.Read().GuestByName(m.Name), Changed: true}), nil
}
