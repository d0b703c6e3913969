package projects

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"corpus/coordinator/api"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/auth"
	"corpus/coordinator/keyring"
	"corpus/coordinator/state"
	"corpus/coordinator/templates"
	"corpus/internal/names"
	"corpus/internal/revert"
	"corpus/internal/seal"
	corpusv1 "corpus/proto/corpus/v1"
)

// Topology export and import: a project's shape (environments, domains,
// services linked and their templates, config keys, volume sizes) moves
// between clusters or is cloned in one. Data does not move with it
// (service backups and volumes do that); generated credentials are made
// anew. Values leave only with with_secrets, to whoever may reveal them.

func (s *Service) ExportProject(ctx context.Context, req *connect.Request[corpusv1.ExportProjectRequest]) (*connect.Response[corpusv1.ExportProjectResponse], error) {
	m := req.Msg
	view := s.b.Store.Read()
	if err := names.Validate("project", m.Name); err != nil {
		return nil, api.ToConnect(err)
	}
	p := view.Project(m.Name)
	if p == nil {
		return nil, api.ToConnect(api.NotFound("project", m.Name, "corpus project list"))
	}
	if err := api.MayUseProject(ctx, p); err != nil {
		return nil, err
	}
	if m.WithSecrets {
		if pr := auth.FromContext(ctx); pr.Kind != auth.Operator && pr.Kind != auth.Dev {
			return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s may export %s without its values only: values need ops or a dev granted it", pr, p.Name))
		}
	}
	envs := p.Envs
	if m.Env != "" {
		e := corpusv1.EnvNamed(p, m.Env)
		if e == nil {
			return nil, api.ToConnect(api.NotFound("environment", p.Name+"/"+m.Env, "corpus project show "+p.Name))
		}
		envs = []*corpusv1.ProjectEnv{e}
	}
	k, err := s.b.Keyring().Open(view)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	top := &corpusv1.ProjectTopology{Version: corpusv1.TopologyVersion, Name: p.Name}
	seen := map[string]*corpusv1.ServiceTopology{}
	for _, e := range envs {
		et := &corpusv1.EnvTopology{Name: e.Name, HttpPort: e.HttpPort, Domains: e.Domains, Https: e.Https, Branch: e.Branch,
			Scale: e.Scale, SharedNothing: e.SharedNothing, MaxParallel: e.MaxParallel}
		for t, pol := range e.Autoscale {
			if et.Autoscale == nil {
				et.Autoscale = map[string]*corpusv1.AutoscalePolicy{}
			}
			et.Autoscale[t] = &corpusv1.AutoscalePolicy{Min: pol.Min, Max: pol.Max, TargetCpuPercent: pol.TargetCpuPercent, TargetRps: pol.TargetRps, ScaleDownWindowSeconds: pol.ScaleDownWindowSeconds}
		}
		if g := view.Guest(e.GuestId); g != nil {
			et.Image, et.Driver, et.Packages, et.Resources = g.Spec.GetImage(), g.Spec.GetDriver(), g.Spec.GetPackages(), g.Spec.GetResources()
			et.VolumeBytes = g.Spec.GetVolume().GetSizeBytes()
			if v := view.Volume(g.Name); v != nil {
				et.VolumeBytes = v.SizeBytes
			}
		}
		linked := map[string]bool{}
		for _, svc := range view.LinksOf(p.Name, e.Name) {
			l := svc.Links[slices.IndexFunc(svc.Links, func(l *corpusv1.ServiceLink) bool { return l.Project == p.Name && l.Env == e.Name })]
			for _, key := range l.Keys {
				linked[key] = true
			}
			st := seen[svc.Name]
			if st == nil {
				if st, err = s.serviceTopology(view, k, svc, m.WithSecrets); err != nil {
					return nil, err
				}
				seen[svc.Name] = st
				top.Services = append(top.Services, st)
			}
			st.Links = append(st.Links, &corpusv1.ServiceLinkTopology{Env: e.Name, As: l.As})
		}
		clear, err := keyring.OpenConfig(k, p.Name, e.Name, e.Config)
		if err != nil {
			return nil, api.ToConnect(err)
		}
		for _, key := range slices.Sorted(maps.Keys(clear)) {
			if linked[key] {
				continue // the link sets it again
			}
			et.ConfigKeys = append(et.ConfigKeys, key)
			if m.WithSecrets {
				if et.Config == nil {
					et.Config = map[string]string{}
				}
				et.Config[key] = clear[key]
			}
		}
		top.Environments = append(top.Environments, et)
	}
	slices.SortFunc(top.Services, func(a, b *corpusv1.ServiceTopology) int { return strings.Compare(a.Name, b.Name) })
	return connect.NewResponse(&corpusv1.ExportProjectResponse{Topology: top}), nil
}

// serviceTopology describes a linked service; an external one's secrets
// are kept (values with secrets), a template's credentials are not: the
// imported service makes its own.
func (s *Service) serviceTopology(view *state.Snap, k *seal.Keyring, svc *corpusv1.Service, withSecrets bool) (*corpusv1.ServiceTopology, error) {
	st := &corpusv1.ServiceTopology{Name: svc.Name, Template: svc.Template, Version: svc.Version, Env: svc.Env,
		ExternalUrl: svc.ExternalUrl, BackupSchedule: svc.BackupSchedule, BackupKeep: svc.BackupKeep}
	if g := view.Guest(svc.GuestId); g != nil {
		st.Driver, st.MemoryBytes = g.Spec.GetDriver(), g.Spec.GetResources().GetMemoryBytes()
		st.SizeBytes = g.Spec.GetVolume().GetSizeBytes()
		if v := view.Volume(g.Name); v != nil {
			st.SizeBytes = v.SizeBytes
		}
	}
	if svc.ExternalUrl == "" {
		return st, nil
	}
	clear, err := keyring.OpenSecrets(k, svc.Name, svc.Secrets)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	st.SecretKeys = slices.Sorted(maps.Keys(clear))
	if withSecrets {
		st.Secrets = clear
	}
	return st, nil
}

// importPlan is a topology resolved against the request and checked.
type importPlan struct {
	project  string
	envs     []*corpusv1.EnvTopology // renamed
	services []*corpusv1.ServiceTopology
}

// planImport checks a whole topology and the cluster's state for it,
// without writing anything.
func (s *Service) planImport(ctx context.Context, view *state.Snap, m *corpusv1.ImportProjectRequest) (*importPlan, error) {
	top := m.Topology
	if top == nil {
		return nil, api.Invalidf("no topology given")
	}
	if top.Version != corpusv1.TopologyVersion {
		return nil, api.Invalidf("topology version %q is not one this coordinator reads (%s)", top.Version, corpusv1.TopologyVersion)
	}
	if top.Sealed != "" {
		return nil, api.Invalidf("the topology's values are still encrypted: corpus project import opens them with --key")
	}
	if err := names.Validate("project", top.Name); err != nil {
		return nil, err
	}
	plan := &importPlan{project: top.Name}
	if m.As != "" {
		if err := names.Validate("project", m.As); err != nil {
			return nil, err
		}
		plan.project = m.As
	}
	envs := top.Environments
	rename := map[string]string{} // topology env -> imported env
	if m.Env != "" {
		from := m.FromEnv
		if from == "" {
			if len(envs) != 1 {
				return nil, api.Invalidf("the topology has %d environments: say which one becomes %s with --from-env", len(envs), m.Env)
			}
			from = envs[0].Name
		}
		i := slices.IndexFunc(envs, func(e *corpusv1.EnvTopology) bool { return e.Name == from })
		if i < 0 {
			return nil, api.Invalidf("the topology has no environment %s", from)
		}
		envs = envs[i : i+1]
		rename[from] = m.Env
	}
	if len(envs) == 0 {
		return nil, api.Invalidf("the topology has no environment")
	}
	p := view.Project(plan.project)
	for _, e := range envs {
		c := proto.Clone(e).(*corpusv1.EnvTopology)
		if to, ok := rename[e.Name]; ok {
			c.Name = to
		}
		if err := api.ValidEnv(c.Name); err != nil {
			return nil, err
		}
		if p != nil && corpusv1.EnvNamed(p, c.Name) != nil {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("project %s already has a %s environment; import it --as another project or --env another environment", plan.project, c.Name))
		}
		if g := view.GuestByName(plan.project + "-" + c.Name); g != nil {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("a guest named %s exists already", g.Name))
		}
		if m.WithoutDomains {
			c.Domains = nil
		}
		for i, given := range c.Domains {
			d, err := names.ParseDomain(given)
			if err != nil {
				return nil, err
			}
			c.Domains[i] = string(d)
			if r := view.RouteByDomain(string(d)); r != nil {
				return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("domain %s is routed to guest %s already; import --without-domains to clone without them", d, r.GuestName))
			}
		}
		for _, key := range c.ConfigKeys {
			if err := state.ValidConfigKey(key); err != nil {
				return nil, err
			}
		}
		for key := range c.Config {
			if !slices.Contains(c.ConfigKeys, key) {
				return nil, api.Invalidf("environment %s has a value for %s, which its config keys do not list", e.Name, key)
			}
		}
		if len(c.Config) > 0 {
			if err := api.CheckConfigChange(c.Config, nil); err != nil {
				return nil, err
			}
		}
		if err := checkTopologyScale(c); err != nil {
			return nil, err
		}
		plan.envs = append(plan.envs, c)
	}
	for _, st := range top.Services {
		c, err := s.planService(ctx, view, top.Name, plan, st, rename)
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", st.Name, err)
		}
		if c != nil {
			plan.services = append(plan.services, c)
		}
	}
	return plan, nil
}

// planService renames a service for the import and checks it; nil when
// it is linked to no imported environment.
func (s *Service) planService(ctx context.Context, view *state.Snap, oldProject string, plan *importPlan, st *corpusv1.ServiceTopology, rename map[string]string) (*corpusv1.ServiceTopology, error) {
	c := proto.Clone(st).(*corpusv1.ServiceTopology)
	c.Links = nil
	for _, l := range st.Links {
		env := l.Env
		if to, ok := rename[env]; ok {
			env = to
		} else if len(rename) > 0 {
			continue // an environment left out
		}
		if err := templates.ValidAs(l.As); err != nil {
			return nil, err
		}
		c.Links = append(c.Links, &corpusv1.ServiceLinkTopology{Env: env, As: l.As})
	}
	if len(c.Links) == 0 {
		return nil, nil
	}
	if plan.project != oldProject {
		c.Name = plan.project + "-" + strings.TrimPrefix(c.Name, oldProject+"-")
	}
	for from, to := range rename {
		if from != to {
			c.Name = strings.TrimSuffix(c.Name, "-"+from) + "-" + to
			if c.Env == from {
				c.Env = to
			}
		}
	}
	if err := names.Validate("service", c.Name); err != nil {
		return nil, err
	}
	if view.Service(c.Name) != nil {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("service %s exists already; import --as another project", c.Name))
	}
	if view.GuestByName(corpusv1.ServiceGuestName(c.Name)) != nil {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("a guest named %s exists already", corpusv1.ServiceGuestName(c.Name)))
	}
	for key := range c.Secrets {
		if !slices.Contains(c.SecretKeys, key) {
			return nil, api.Invalidf("a value for %s, which its secret keys do not list", key)
		}
	}
	if c.ExternalUrl == "" {
		// The template, version, size and memory, checked as create would.
		if _, _, err := s.b.Services.TemplateGuest(&corpusv1.Service{Name: c.Name, Env: c.Env}, createServiceRequest(c)); err != nil {
			return nil, err
		}
	} else if err := api.CheckExternal(createServiceRequest(c)); err != nil {
		return nil, err
	}
	return c, nil
}

func createServiceRequest(c *corpusv1.ServiceTopology) *corpusv1.CreateServiceRequest {
	return &corpusv1.CreateServiceRequest{Name: c.Name, Template: c.Template, Version: c.Version, SizeBytes: c.SizeBytes, MemoryBytes: c.MemoryBytes,
		Env: c.Env, Driver: c.Driver, ExternalUrl: c.ExternalUrl, Secrets: c.Secrets, BackupSchedule: c.BackupSchedule, BackupKeep: c.BackupKeep}
}

func (s *Service) ImportProject(ctx context.Context, req *connect.Request[corpusv1.ImportProjectRequest]) (*connect.Response[corpusv1.ImportProjectResponse], error) {
	m := req.Msg
	plan, err := s.planImport(ctx, s.b.Store.Read(), m)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	res := &corpusv1.ImportProjectResponse{Project: plan.project}
	if m.DryRun {
		for _, e := range plan.envs {
			res.Created = append(res.Created, "environment "+plan.project+"/"+e.Name)
		}
		for _, st := range plan.services {
			res.Created = append(res.Created, "service "+st.Name)
		}
		return connect.NewResponse(res), nil
	}
	svcs := s.b.Services
	undo := revert.New()
	defer undo.Fail()
	cleanup := context.WithoutCancel(ctx)
	// The services belong to the project, so they are made once it
	// exists, and undone after it (its links gone with it).
	var made []string
	undo.Add(func() {
		for _, name := range made {
			svcs.DeleteService(cleanup, connect.NewRequest(&corpusv1.DeleteServiceRequest{Name: name, Purge: true}))
		}
	})
	for _, e := range plan.envs {
		_, err := s.CreateProject(ctx, connect.NewRequest(&corpusv1.CreateProjectRequest{
			Name: plan.project, Env: e.Name, Image: e.Image, Driver: e.Driver, Resources: e.Resources, Domains: e.Domains,
			HttpPort: e.HttpPort, VolumeBytes: e.VolumeBytes, Branch: e.Branch, Packages: e.Packages, Https: e.Https,
		}))
		if err != nil {
			return nil, err
		}
		env := e.Name
		undo.Add(func() {
			s.DeleteProject(cleanup, connect.NewRequest(&corpusv1.DeleteProjectRequest{Name: plan.project, Env: env}))
		})
		res.Created = append(res.Created, "environment "+plan.project+"/"+env)
		if len(e.Config) > 0 {
			if err := s.importConfig(ctx, plan.project, env, e.Config); err != nil {
				return nil, err
			}
		}
		if err := s.importScale(ctx, plan.project, e); err != nil {
			return nil, err
		}
	}
	for _, st := range plan.services {
		creq := createServiceRequest(st)
		creq.Project = plan.project
		if _, err := svcs.CreateService(ctx, connect.NewRequest(creq)); err != nil {
			return nil, err
		}
		made = append(made, st.Name)
		res.Created = append(res.Created, "service "+st.Name)
	}
	for _, st := range plan.services {
		for _, l := range st.Links {
			if err := s.importLink(ctx, st.Name, plan.project, l); err != nil {
				return nil, fmt.Errorf("linking service %s to %s/%s: %w", st.Name, plan.project, l.Env, err)
			}
			res.Created = append(res.Created, "link "+st.Name+" -> "+plan.project+"/"+l.Env)
		}
	}
	undo.Success()
	return connect.NewResponse(res), nil
}

// checkTopologyScale checks an environment's scale and autoscale policies
// as corpus scale and corpus autoscale would.
func checkTopologyScale(e *corpusv1.EnvTopology) error {
	for t, n := range e.Scale {
		if err := api.ValidProcessName(t); err != nil {
			return err
		}
		if n > state.MaxInstances {
			return api.Invalidf("environment %s: %s=%d: at most %d instances", e.Name, t, n, state.MaxInstances)
		}
	}
	if corpusv1.InstanceCount(e.Scale) > 1 && e.VolumeBytes > 0 && !e.SharedNothing {
		return api.Invalidf("environment %s runs %d instances but keeps data on a volume without shared_nothing", e.Name, corpusv1.InstanceCount(e.Scale))
	}
	for t, pol := range e.Autoscale {
		if err := api.ValidProcessName(t); err != nil {
			return err
		}
		if why := state.ValidAutoscale(pol); why != "" {
			return api.Invalidf("environment %s: autoscale %s: %s", e.Name, t, why)
		}
		if pol.Max > 1 && e.VolumeBytes > 0 && !e.SharedNothing {
			return api.Invalidf("environment %s: autoscale %s up to %d instances needs shared_nothing (it keeps data on a volume)", e.Name, t, pol.Max)
		}
	}
	return nil
}

// importScale gives a new environment its scale and autoscale policies.
func (s *Service) importScale(ctx context.Context, project string, e *corpusv1.EnvTopology) error {
	if len(e.Scale) > 0 || e.SharedNothing || e.MaxParallel > 0 {
		view := s.b.Store.Read()
		p := view.Project(project)
		cmd, changed, err := scaleCommand(view, p, corpusv1.EnvNamed(p, e.Name), e.Scale, e.SharedNothing, e.MaxParallel)
		if err != nil {
			return err
		}
		if changed {
			if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_ScaleEnv{ScaleEnv: cmd}}); err != nil {
				return err
			}
		}
	}
	for _, t := range slices.Sorted(maps.Keys(e.Autoscale)) {
		if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetAutoscale{SetAutoscale: &corpusv1.SetAutoscale{
			Project: project, Env: e.Name, Process: t, Policy: e.Autoscale[t],
		}}}); err != nil {
			return err
		}
	}
	return nil
}

// importConfig sets a new environment's config (it has no release yet:
// nothing to restart).
func (s *Service) importConfig(ctx context.Context, project, env string, vars map[string]string) error {
	k, err := s.b.Keyring().Ensure(ctx)
	if err != nil {
		return api.ToConnect(err)
	}
	sealed, err := keyring.SealAll(k, vars, func(key string) string { return state.ConfigPlace(project, env, key) })
	if err != nil {
		return api.ToConnect(err)
	}
	_, err = s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetConfig{SetConfig: &corpusv1.SetConfig{Project: project, Env: env, Set: sealed}}})
	return err
}

// importLink links an imported service once it has an address.
func (s *Service) importLink(ctx context.Context, service, project string, l *corpusv1.ServiceLinkTopology) error {
	svcs := s.b.Services
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		view := s.b.Store.Read()
		svc := view.Service(service)
		if svc == nil {
			return errors.New("the service is gone")
		}
		vars, err := svcs.LinkEnv(view, svc, l.As)
		if err == nil {
			return svcs.WriteLink(ctx, service, project, l.Env, l.As, vars)
		}
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			return err
		}
		if err := view.Wait(wctx); err != nil && wctx.Err() != nil {
			return fmt.Errorf("the service was not placed within a minute: %w", err)
		}
	}
}
