// Package services serves ServiceService: third-party services made
// from templates (a guest of their own with a volume) or external
// endpoints, linked to project environments as config, backed up,
// restored and moved off a lost node; and the agents' calls about them.
package services

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/api"
	"corpus/coordinator/api/backups"
	"corpus/coordinator/auth"
	"corpus/coordinator/keyring"
	"corpus/coordinator/state"
	"corpus/coordinator/templates"
	"corpus/internal/names"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
)

// New returns the handler of ServiceService.
func New(b *api.Backend) api.Services { return &serviceService{b} }

type serviceService struct{ b *api.Backend }

// templates reads the templates this coordinator offers now: the
// built-in ones and the operator's folder, read again on every call so an
// added template needs no restart.
func (s *serviceService) templates() (templates.Set, error) {
	set, err := templates.Load(s.b.ServiceTemplates)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("reading the service templates: %w", err))
	}
	return set, nil
}

func (s *serviceService) ListTemplates(ctx context.Context, _ *connect.Request[corpusv1.ListTemplatesRequest]) (*connect.Response[corpusv1.ListTemplatesResponse], error) {
	set, err := s.templates()
	if err != nil {
		return nil, err
	}
	res := &corpusv1.ListTemplatesResponse{}
	for _, t := range set.Sorted() {
		t = proto.Clone(t).(*corpusv1.ServiceTemplate)
		t.Files = nil // the scripts are in the template's folder
		res.Templates = append(res.Templates, t)
	}
	return connect.NewResponse(res), nil
}

// serviceView is a service as clients see it: secrets by name only.
func serviceView(view *state.Snap, svc *corpusv1.Service) *corpusv1.ServiceView {
	out := &corpusv1.ServiceView{}
	svc = proto.Clone(svc).(*corpusv1.Service)
	out.SecretKeys = slices.Sorted(maps.Keys(svc.Secrets))
	svc.Secrets = nil
	if t := svc.TemplateSpec; t != nil {
		t.Files = nil
	}
	out.Service = svc
	if g := view.Guest(svc.GuestId); g != nil {
		out.GuestStatus, out.Address = api.GuestStatus(view, g), g.Address
		if n := view.Node(g.NodeId); n != nil {
			out.NodeName = n.Name
		}
		if out.GuestStatus == corpusv1.GuestLost {
			svc.Observed = &corpusv1.ServiceObserved{State: corpusv1.ServiceLost, Message: "its node is down: restore it from a backup onto another node (corpus service restore " + svc.Name + " --to-node NODE)"}
		}
	}
	for _, b := range view.Backups(svc.Name) {
		if b.Status == corpusv1.BackupSucceeded {
			out.LastBackup = b
			break
		}
	}
	return out
}

func (s *serviceService) CreateService(ctx context.Context, req *connect.Request[corpusv1.CreateServiceRequest]) (*connect.Response[corpusv1.CreateServiceResponse], error) {
	m := proto.Clone(req.Msg).(*corpusv1.CreateServiceRequest)
	// Extensions see the secrets' names, never their values, and cannot
	// change them.
	secrets := m.Secrets
	redacted := map[string]string{}
	for k := range secrets {
		redacted[k] = ""
	}
	var (
		svc   *corpusv1.Service
		clear map[string]string
		g     *corpusv1.Guest
	)
	check := func() error {
		m.Secrets = secrets
		defer func() { m.Secrets = redacted }()
		if err := names.Validate("service", m.Name); err != nil {
			return err
		}
		guestName := corpusv1.ServiceGuestName(m.Name)
		if err := names.Validate("guest", guestName); err != nil {
			return api.Invalidf("service name %q is too long for its guest name %q", m.Name, guestName)
		}
		if m.Env == "" {
			m.Env = corpusv1.EnvDev
		}
		if err := api.ValidEnv(m.Env); err != nil {
			return err
		}
		if err := state.ValidSchedule(m.BackupSchedule); err != nil {
			return err
		}
		if err := mayCreateIn(ctx, s.b.Store.Read(), m.Project); err != nil {
			return err
		}
		svc = &corpusv1.Service{Id: secret.Hex(8), Name: m.Name, Env: m.Env, DesiredState: state.DesiredRunning,
			BackupSchedule: m.BackupSchedule, BackupKeep: m.BackupKeep, Project: m.Project}
		clear, g = nil, nil
		if m.ExternalUrl != "" {
			if err := api.CheckExternal(m); err != nil {
				return err
			}
			svc.ExternalUrl, clear = m.ExternalUrl, m.Secrets
			return nil
		}
		var err error
		g, clear, err = s.TemplateGuest(svc, m)
		return err
	}
	if err := check(); err != nil {
		return nil, api.ToConnect(err)
	}
	admitted, err := s.b.Admission().Admit(ctx, corpusv1.OnServiceCreate, m, check)
	if err != nil {
		return nil, err
	}
	m.Secrets = secrets
	svc.Admission = admitted
	view := s.b.Store.Read()
	if old := view.Service(m.Name); old != nil {
		if err := api.MayUseService(ctx, view, old, true); err != nil {
			return nil, err
		}
		if sameService(view, old, svc, g) {
			return connect.NewResponse(&corpusv1.CreateServiceResponse{Service: serviceView(view, old)}), nil
		}
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("service %s exists with other settings (corpus service show %s)", m.Name, m.Name))
	}
	if g != nil && view.GuestByName(g.Name) != nil {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("a guest named %s exists already; choose another service name", g.Name))
	}
	if len(clear) > 0 {
		k, err := s.b.Keyring().Ensure(ctx)
		if err != nil {
			return nil, api.ToConnect(err)
		}
		if svc.Secrets, err = keyring.SealAll(k, clear, func(key string) string { return state.ServicePlace(svc.Name, key) }); err != nil {
			return nil, api.ToConnect(err)
		}
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_CreateService{CreateService: &corpusv1.CreateService{Service: svc, Guest: g}}}); err != nil {
		return nil, err
	}
	view = s.b.Store.Read()
	return connect.NewResponse(&corpusv1.CreateServiceResponse{Service: serviceView(view, view.Service(m.Name)), Created: true}), nil
}

// mayCreateIn checks the caller may make a service in project (""
// for none, which is the operators' alone).
func mayCreateIn(ctx context.Context, view *state.Snap, project string) error {
	pr := auth.FromContext(ctx)
	var p *corpusv1.Project
	if project != "" {
		if err := names.Validate("project", project); err != nil {
			return err
		}
		if p = view.Project(project); p == nil {
			return api.NotFound("project", project, "corpus project list")
		}
	}
	switch a := auth.ProjectAccess(pr, p); {
	case a == auth.ReadWrite:
		return nil
	case p == nil:
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s makes services in a project granted to it: give it (--project PROJECT; corpus project list shows them); a service of no project is the operators'", pr))
	case a == auth.ReadOnly:
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s may only read project %s: its devs and ops make its services", pr, p.Name))
	}
	return api.MayUseProject(ctx, p)
}

// TemplateGuest fills in a service made from a template and returns its
// guest and its generated credentials.
func (s *serviceService) TemplateGuest(svc *corpusv1.Service, m *corpusv1.CreateServiceRequest) (*corpusv1.Guest, map[string]string, error) {
	if m.Template == "" {
		return nil, nil, api.ToConnect(api.Invalidf("give a template (corpus service templates lists them) or an external endpoint"))
	}
	if len(m.Secrets) > 0 {
		return nil, nil, api.ToConnect(api.Invalidf("secrets are for external services; a template's credentials are generated"))
	}
	set, err := s.templates()
	if err != nil {
		return nil, nil, err
	}
	t := set[m.Template]
	if t == nil {
		return nil, nil, api.ToConnect(api.NotFound("template", m.Template, "corpus service templates"))
	}
	version := m.Version
	if version == "" {
		version = t.Versions[0]
	}
	if !slices.Contains(t.Versions, version) {
		return nil, nil, api.ToConnect(api.Invalidf("template %s offers versions %s, not %q", t.Name, strings.Join(t.Versions, ", "), version))
	}
	size, mem := m.SizeBytes, m.MemoryBytes
	if size == 0 {
		size = t.DefaultVolumeBytes
	}
	if mem == 0 {
		mem = t.DefaultMemoryBytes
	}
	if size < t.MinVolumeBytes {
		return nil, nil, api.ToConnect(api.Invalidf("a %s volume needs at least %d MiB, not %d MiB", t.Name, t.MinVolumeBytes>>20, size>>20))
	}
	if mem < t.MinMemoryBytes {
		return nil, nil, api.ToConnect(api.Invalidf("%s needs at least %d MiB of memory, not %d MiB", t.Name, t.MinMemoryBytes>>20, mem>>20))
	}
	svc.Template, svc.Version, svc.TemplateSpec = t.Name, version, t
	spec := &corpusv1.GuestSpec{
		Driver: m.Driver, Image: t.Image, Packages: templates.Packages(t, version),
		Resources: &corpusv1.Resources{MemoryBytes: mem},
		Volume:    &corpusv1.VolumeSpec{SizeBytes: size, Path: t.VolumePath},
	}
	// The data of a service deleted without --purge comes back with it;
	// while the node it is on is down, the service waits for it.
	view := s.b.Store.Read()
	if v := keptVolume(view, svc.Name); v != nil {
		spec.Volume = &corpusv1.VolumeSpec{UseVolume: v.Name, Path: t.VolumePath}
	} else if v := strandedVolume(view, svc.Name); v != nil {
		return nil, nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"service %s's data is on volume %s, on node %s, which is down: make the service again once the node is back (`corpus node list`), or delete the volume to start empty (`corpus volume delete %s`)",
			svc.Name, v.Name, view.Node(v.NodeId).GetName(), v.Name))
	}
	if err := api.NormalizeSpec(spec); err != nil {
		return nil, nil, api.ToConnect(err)
	}
	clear := map[string]string{}
	for _, c := range t.Credentials {
		clear[c] = secret.Hex(16)
	}
	g := &corpusv1.Guest{Id: secret.Hex(8), Name: corpusv1.ServiceGuestName(svc.Name), Spec: spec, DesiredState: state.DesiredRunning}
	return g, clear, nil
}

// strandedVolume is the volume a service deleted without --purge left
// under its guest's own name (svc-NAME) on a node that is down: the name
// a new volume would take, so the service cannot be made again without
// it until the node is back.
func strandedVolume(view *state.Snap, service string) *corpusv1.Volume {
	v := view.Volume(corpusv1.ServiceGuestName(service))
	if v == nil || v.GuestId != "" || v.DesiredState == state.VolumeDeleted || view.Node(v.NodeId).GetStatus() != state.NodeDown {
		return nil
	}
	return v
}

// keptVolume is the volume a service deleted without --purge left: the
// newest unbound volume of its guests' names (svc-NAME, or svc-NAME-N
// after a restore onto another node) on a node that is not down.
func keptVolume(view *state.Snap, service string) *corpusv1.Volume {
	base := corpusv1.ServiceGuestName(service)
	var kept *corpusv1.Volume
	for _, v := range view.Volumes() {
		suffix, ok := strings.CutPrefix(v.Name, base)
		if !ok || (suffix != "" && !isReplacementSuffix(suffix)) {
			continue
		}
		if v.GuestId != "" || v.DesiredState == state.VolumeDeleted || view.Node(v.NodeId).GetStatus() == state.NodeDown {
			continue
		}
		if kept == nil || v.CreateIndex > kept.CreateIndex {
			kept = v
		}
	}
	return kept
}

// isReplacementSuffix says whether s is "-N", N a number from 2.
func isReplacementSuffix(s string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(s, "-"))
	return strings.HasPrefix(s, "-") && err == nil && n >= 2 && strconv.Itoa(n) == s[1:]
}

// sameService says whether a create asks for the service that exists.
func sameService(view *state.Snap, old, want *corpusv1.Service, g *corpusv1.Guest) bool {
	if old.Template != want.Template || old.Version != want.Version || old.ExternalUrl != want.ExternalUrl || old.Env != want.Env || old.Project != want.Project {
		return false
	}
	if g == nil {
		return true
	}
	og := view.Guest(old.GuestId)
	return og != nil && og.Spec.GetResources().GetMemoryBytes() == g.Spec.Resources.MemoryBytes
}

func (s *serviceService) ListServices(ctx context.Context, _ *connect.Request[corpusv1.ListServicesRequest]) (*connect.Response[corpusv1.ListServicesResponse], error) {
	view := s.b.Store.Read()
	res := &corpusv1.ListServicesResponse{}
	for _, svc := range view.Services() {
		if api.MayUseService(ctx, view, svc, false) == nil {
			res.Services = append(res.Services, serviceView(view, svc))
		}
	}
	return connect.NewResponse(res), nil
}

func (s *serviceService) GetService(ctx context.Context, req *connect.Request[corpusv1.GetServiceRequest]) (*connect.Response[corpusv1.GetServiceResponse], error) {
	m := req.Msg
	wait := time.Duration(m.WaitSeconds) * time.Second
	if wait <= 0 || wait > api.MaxWait {
		wait = api.DefaultWait
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		view := s.b.Store.Read()
		svc, err := api.PickService(ctx, view, m.Name, false)
		if err != nil {
			return nil, err
		}
		idx := svc.ModifyIndex
		if g := view.Guest(svc.GuestId); g != nil && g.ModifyIndex > idx {
			idx = g.ModifyIndex
		}
		if m.MinIndex == 0 || idx > m.MinIndex || view.Wait(ctx) != nil {
			return connect.NewResponse(&corpusv1.GetServiceResponse{Service: serviceView(view, svc), Index: idx}), nil
		}
	}
}

func (s *serviceService) setDesired(ctx context.Context, name, desired string, purge bool) (*corpusv1.ServiceView, bool, error) {
	view := s.b.Store.Read()
	svc, err := api.PickService(ctx, view, name, true)
	if err != nil {
		return nil, false, err
	}
	if desired != state.DesiredDeleted && svc.DesiredState == desired {
		return serviceView(view, svc), false, nil
	}
	if desired == state.DesiredDeleted && len(svc.Links) > 0 {
		var to []string
		for _, l := range svc.Links {
			to = append(to, l.Project+"/"+l.Env)
		}
		return nil, false, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"service %s is linked to %s: unlink it first (corpus service unlink %s PROJECT --env ENV)", svc.Name, strings.Join(to, ", "), svc.Name))
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetServiceDesired{SetServiceDesired: &corpusv1.SetServiceDesired{
		Name: name, DesiredState: desired, Purge: purge,
	}}}); err != nil {
		return nil, false, err
	}
	view = s.b.Store.Read()
	if after := view.Service(name); after != nil {
		return serviceView(view, after), true, nil
	}
	return nil, true, nil
}

func (s *serviceService) DeleteService(ctx context.Context, req *connect.Request[corpusv1.DeleteServiceRequest]) (*connect.Response[corpusv1.DeleteServiceResponse], error) {
	before := s.b.Store.Read().Service(req.Msg.Name)
	if _, _, err := s.setDesired(ctx, req.Msg.Name, state.DesiredDeleted, req.Msg.Purge); err != nil {
		return nil, err
	}
	before = proto.Clone(before).(*corpusv1.Service)
	before.Secrets = nil
	if before.TemplateSpec != nil {
		before.TemplateSpec.Files = nil
	}
	return connect.NewResponse(&corpusv1.DeleteServiceResponse{Service: before}), nil
}

func (s *serviceService) StartService(ctx context.Context, req *connect.Request[corpusv1.ServiceActionRequest]) (*connect.Response[corpusv1.ServiceActionResponse], error) {
	v, changed, err := s.setDesired(ctx, req.Msg.Name, state.DesiredRunning, false)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.ServiceActionResponse{Service: v, Changed: changed}), nil
}

func (s *serviceService) StopService(ctx context.Context, req *connect.Request[corpusv1.ServiceActionRequest]) (*connect.Response[corpusv1.ServiceActionResponse], error) {
	v, changed, err := s.setDesired(ctx, req.Msg.Name, state.DesiredStopped, false)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.ServiceActionResponse{Service: v, Changed: changed}), nil
}

// ResizeService grows (or shrinks, when the data fits) the service's
// volume and changes its memory, each through the same checks as the
// volume and guest calls.
func (s *serviceService) ResizeService(ctx context.Context, req *connect.Request[corpusv1.ResizeServiceRequest]) (*connect.Response[corpusv1.ServiceActionResponse], error) {
	m := req.Msg
	view := s.b.Store.Read()
	svc, err := api.PickService(ctx, view, m.Name, true)
	if err != nil {
		return nil, err
	}
	if svc.GuestId == "" {
		return nil, api.ToConnect(api.Invalidf("external service %s has no volume or memory", svc.Name))
	}
	if m.SizeBytes == 0 && m.MemoryBytes == 0 {
		return nil, api.ToConnect(api.Invalidf("give a new --size or --memory"))
	}
	t := svc.TemplateSpec
	if m.SizeBytes != 0 && m.SizeBytes < t.GetMinVolumeBytes() {
		return nil, api.ToConnect(api.Invalidf("a %s volume needs at least %d MiB", svc.Template, t.GetMinVolumeBytes()>>20))
	}
	if m.MemoryBytes != 0 && m.MemoryBytes < t.GetMinMemoryBytes() {
		return nil, api.ToConnect(api.Invalidf("%s needs at least %d MiB of memory", svc.Template, t.GetMinMemoryBytes()>>20))
	}
	g := view.Guest(svc.GuestId)
	changed := false
	if m.SizeBytes != 0 {
		v := view.VolumeOfGuest(svc.GuestId)
		if v == nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("service %s has no volume yet", svc.Name))
		}
		// Smaller only when the data fits with the volume package's margin.
		res, err := s.b.Volumes.ResizeVolume(ctx, connect.NewRequest(&corpusv1.ResizeVolumeRequest{Name: v.Name, SizeBytes: m.SizeBytes, AllowShrink: true}))
		if err != nil {
			return nil, err
		}
		changed = res.Msg.Changed
	}
	if m.MemoryBytes != 0 && g != nil && g.Spec.GetResources().GetMemoryBytes() != m.MemoryBytes {
		mem := m.MemoryBytes
		if _, err := s.b.Guests.UpdateGuest(ctx, connect.NewRequest(&corpusv1.UpdateGuestRequest{Name: g.Name, MemoryBytes: &mem})); err != nil {
			return nil, err
		}
		changed = true
	}
	view = s.b.Store.Read()
	return connect.NewResponse(&corpusv1.ServiceActionResponse{Service: serviceView(view, view.Service(svc.Name)), Changed: changed}), nil
}

func (s *serviceService) UpdateService(ctx context.Context, req *connect.Request[corpusv1.UpdateServiceRequest]) (*connect.Response[corpusv1.ServiceActionResponse], error) {
	m := req.Msg
	view := s.b.Store.Read()
	svc, err := api.PickService(ctx, view, m.Name, true)
	if err != nil {
		return nil, err
	}
	schedule, keep, err := backups.BackupPolicy(svc.BackupSchedule, svc.BackupKeep, m.BackupSchedule, m.BackupKeep)
	if err != nil {
		return nil, err
	}
	if schedule == svc.BackupSchedule && keep == svc.BackupKeep {
		return connect.NewResponse(&corpusv1.ServiceActionResponse{Service: serviceView(view, svc)}), nil
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_UpdateService{UpdateService: &corpusv1.UpdateService{
		Name: svc.Name, BackupSchedule: schedule, BackupKeep: keep,
	}}}); err != nil {
		return nil, err
	}
	view = s.b.Store.Read()
	return connect.NewResponse(&corpusv1.ServiceActionResponse{Service: serviceView(view, view.Service(svc.Name)), Changed: true}), nil
}

// LinkEnv is what a link named as gives a project: the template's link
// variables filled in, or an external service's endpoint and secrets.
func (s *serviceService) LinkEnv(view *state.Snap, svc *corpusv1.Service, as string) (map[string]string, error) {
	k, err := s.b.Keyring().Open(view)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	secrets, err := keyring.OpenSecrets(k, svc.Name, svc.Secrets)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	if svc.ExternalUrl != "" {
		out := map[string]string{as + "_URL": svc.ExternalUrl}
		for key, v := range secrets {
			out[as+"_"+key] = v
		}
		return out, nil
	}
	g := view.Guest(svc.GuestId)
	if g == nil || g.Address == "" {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("service %s is not placed on a node yet; link it once `corpus service show %s` gives its address", svc.Name, svc.Name))
	}
	vars := map[string]string{"host": g.Address, "port": strconv.Itoa(int(svc.TemplateSpec.GetPort())), "name": svc.Name, "version": svc.Version}
	maps.Copy(vars, secrets)
	return templates.LinkEnv(svc.TemplateSpec, as, vars), nil
}

func (s *serviceService) LinkService(ctx context.Context, req *connect.Request[corpusv1.LinkServiceRequest], stream *connect.ServerStream[corpusv1.DeployOutput]) error {
	m := req.Msg
	view := s.b.Store.Read()
	svc, err := api.PickService(ctx, view, m.Service, true)
	if err != nil {
		return err
	}
	p, e, err := api.PickEnv(ctx, view, m.Project, m.Env)
	if err != nil {
		return err
	}
	as := m.As
	if as == "" {
		as = templates.DefaultAs(svc.Template)
		if svc.ExternalUrl != "" {
			as = templates.DefaultAs(svc.Name)
		}
	}
	if err := templates.ValidAs(as); err != nil {
		return api.ToConnect(api.Invalidf("%v", err))
	}
	env, err := s.LinkEnv(view, svc, as)
	if err != nil {
		return err
	}
	if err := s.WriteLink(ctx, svc.Name, p.Name, e.Name, as, env); err != nil {
		return err
	}
	what := fmt.Sprintf("service %s linked as %s (%s)", svc.Name, as, strings.Join(slices.Sorted(maps.Keys(env)), " "))
	return s.b.Releases.ReleaseConfig(ctx, p.Name, e.Name, what, m.NoRestart, stream.Send)
}

// WriteLink records a link of a service with the variables env, sealed
// for the environment.
func (s *serviceService) WriteLink(ctx context.Context, service, project, env, as string, vars map[string]string) error {
	if err := api.CheckConfigChange(vars, nil); err != nil {
		return api.ToConnect(err)
	}
	k, err := s.b.Keyring().Ensure(ctx)
	if err != nil {
		return api.ToConnect(err)
	}
	sealed, err := keyring.SealAll(k, vars, func(key string) string { return state.ConfigPlace(project, env, key) })
	if err != nil {
		return api.ToConnect(err)
	}
	_, err = s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_LinkService{LinkService: &corpusv1.LinkService{
		Service: service, Link: &corpusv1.ServiceLink{Project: project, Env: env, As: as}, Config: sealed,
	}}})
	return err
}

func (s *serviceService) UnlinkService(ctx context.Context, req *connect.Request[corpusv1.UnlinkServiceRequest], stream *connect.ServerStream[corpusv1.DeployOutput]) error {
	m := req.Msg
	view := s.b.Store.Read()
	svc, err := api.PickService(ctx, view, m.Service, true)
	if err != nil {
		return err
	}
	p, e, err := api.PickEnv(ctx, view, m.Project, m.Env)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(svc.Links, func(l *corpusv1.ServiceLink) bool { return l.Project == p.Name && l.Env == e.Name })
	if i < 0 {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("service %s is not linked to %s/%s", svc.Name, p.Name, e.Name))
	}
	keys := svc.Links[i].Keys
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_UnlinkService{UnlinkService: &corpusv1.UnlinkService{
		Service: svc.Name, Project: p.Name, Env: e.Name,
	}}}); err != nil {
		return err
	}
	what := fmt.Sprintf("service %s unlinked (%s removed)", svc.Name, strings.Join(keys, " "))
	return s.b.Releases.ReleaseConfig(ctx, p.Name, e.Name, what, m.NoRestart, stream.Send)
}
