// Package projects serves ProjectService: projects and their
// environments, releases and rollbacks, config, deploys, scale and
// autoscale, blue-green switches, logs, export and import; and the
// agents' calls about them (releases recorded, git access, pushes
// linted, instances rolled).
package projects

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"corpus/coordinator/api"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator/audit"
	"corpus/coordinator/auth"
	"corpus/coordinator/keyring"
	"corpus/coordinator/state"
	"corpus/internal/names"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
)

// Project defaults.
const (
	DefaultProjectImage  = "busybox"
	DefaultProjectBranch = "main"
	DefaultHTTPPort      = 80
	DefaultVolumeBytes   = 1 << 30
	// ProjectsRoot is where projects live inside their guests.
	ProjectsRoot = "/srv/projects"
	// maxReleaseLog bounds the deploy output kept with a release.
	maxReleaseLog = 64 << 10
)

// New returns the handler of ProjectService.
func New(b *api.Backend) *Service { return &Service{b} }

// Service is the handler of ProjectService, and the releases a
// service's link makes (api.Releases).
type Service struct{ b *api.Backend }

// Agent is the part of AgentService about projects: releases, git
// access, pushes linted, instances rolled, environments switched.
type Agent struct{ b *api.Backend }

// NewAgent returns the part of AgentService about projects.
func NewAgent(b *api.Backend) *Agent { return &Agent{b} }

// branchRE is what corpus accepts as a deploy branch: a plain git branch
// name without the forms git itself refuses.
var branchRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$`)

func validBranch(b string) error {
	if !branchRE.MatchString(b) || strings.Contains(b, "..") || strings.Contains(b, "//") ||
		strings.HasSuffix(b, "/") || strings.HasSuffix(b, ".lock") || strings.HasSuffix(b, ".") {
		return api.Invalidf("branch %q is not a valid git branch name", b)
	}
	return nil
}

// commitRE is a git object id, abbreviated or whole.
var commitRE = regexp.MustCompile(`^[0-9a-f]{4,64}$`)

// validRelease checks the project and environment an agent's release
// call names.
func validRelease(project, env string) error {
	if err := names.Validate("project", project); err != nil {
		return err
	}
	return api.ValidEnv(env)
}

func (s *Service) CreateProject(ctx context.Context, req *connect.Request[corpusv1.CreateProjectRequest]) (*connect.Response[corpusv1.CreateProjectResponse], error) {
	m := proto.Clone(req.Msg).(*corpusv1.CreateProjectRequest)
	var (
		guestName string
		domains   []string
		spec      *corpusv1.GuestSpec
	)
	check := func() error {
		if err := names.Validate("project", m.Name); err != nil {
			return err
		}
		if m.Env == "" {
			m.Env = corpusv1.EnvDev
		}
		if err := api.ValidEnv(m.Env); err != nil {
			return err
		}
		guestName = m.Name + "-" + m.Env
		if err := names.Validate("guest", guestName); err != nil {
			return api.Invalidf("project name %q is too long for its guest name %q", m.Name, guestName)
		}
		if m.Image == "" {
			m.Image = DefaultProjectImage
		}
		if m.Branch == "" {
			m.Branch = DefaultProjectBranch
		}
		if err := validBranch(m.Branch); err != nil {
			return err
		}
		if m.HttpPort == 0 {
			m.HttpPort = DefaultHTTPPort
		}
		if err := api.ValidPort("http port", m.HttpPort); err != nil {
			return err
		}
		if m.VolumeBytes == 0 {
			m.VolumeBytes = DefaultVolumeBytes
		}
		domains = nil
		for _, given := range m.Domains {
			d, err := names.ParseDomain(given)
			if err != nil {
				return err
			}
			domains = append(domains, string(d))
		}
		spec = &corpusv1.GuestSpec{
			Driver: m.Driver, Image: m.Image, Resources: m.Resources, Packages: m.Packages,
			Volume: &corpusv1.VolumeSpec{SizeBytes: m.VolumeBytes, Path: ProjectsRoot + "/" + m.Name + "/data"},
		}
		// The data of an environment deleted with --keep-volumes (an unbound
		// volume of the environment's guest's name) comes back with it.
		if v := s.b.Store.Read().Volume(guestName); v != nil && v.GuestId == "" && v.GetDesiredState() != state.DesiredDeleted {
			spec.Volume = &corpusv1.VolumeSpec{UseVolume: guestName, Path: spec.Volume.Path}
		}
		if err := api.NormalizeSpec(spec); err != nil {
			return err
		}
		return nil
	}
	if err := check(); err != nil {
		return nil, api.ToConnect(err)
	}
	admitted, err := s.b.Admission().Admit(ctx, corpusv1.OnProjectCreate, m, check)
	if err != nil {
		return nil, err
	}
	env := &corpusv1.ProjectEnv{Name: m.Env, Domains: domains, HttpPort: m.HttpPort, Branch: m.Branch, Https: m.Https}
	if p := s.b.Store.Read().Project(m.Name); p != nil {
		if e := corpusv1.EnvNamed(p, m.Env); e != nil {
			// The same request again is a success.
			g := s.b.Store.Read().Guest(e.GuestId)
			if g != nil && g.Spec.GetImage() == spec.Image && slices.Equal(g.Spec.GetPackages(), spec.Packages) && slices.Equal(e.Domains, domains) && e.Branch == m.Branch && e.HttpPort == m.HttpPort && e.Https == m.Https {
				return connect.NewResponse(&corpusv1.CreateProjectResponse{Project: p, GitRemote: s.remote(s.b.Store.Read(), p, e)}), nil
			}
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("project %s already has a %s environment with other settings", m.Name, m.Env))
		}
	}
	g := &corpusv1.Guest{Id: secret.Hex(8), Name: guestName, Spec: spec, DesiredState: state.DesiredRunning, Admission: admitted}
	var routes []*corpusv1.Route
	for _, d := range domains {
		routes = append(routes, &corpusv1.Route{Id: secret.Hex(8), Kind: string(corpusv1.RouteHTTP), Domain: d, GuestId: g.Id, GuestPort: m.HttpPort,
			Https: m.Https, RedirectHttps: m.Https})
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_CreateProject{CreateProject: &corpusv1.CreateProject{
		ProjectId: secret.Hex(8), Name: m.Name, Env: env, Guest: g, Routes: routes, Admission: admitted,
	}}}); err != nil {
		return nil, err
	}
	view := s.b.Store.Read()
	p := view.Project(m.Name)
	return connect.NewResponse(&corpusv1.CreateProjectResponse{Project: p, Created: true, GitRemote: s.remote(view, p, corpusv1.EnvNamed(p, m.Env))}), nil
}

// remote is the git remote of a project environment, "" until its guest
// is placed on a node with a git endpoint. The path names the project
// alone unless another environment of it lives on the same node.
func (s *Service) remote(view *state.Snap, p *corpusv1.Project, e *corpusv1.ProjectEnv) string {
	g := view.Guest(e.GetGuestId())
	if g == nil || g.NodeId == "" {
		return ""
	}
	n := view.Node(g.NodeId)
	if n == nil || n.GitPort == 0 || n.Address == "" {
		return ""
	}
	path := p.Name
	for _, other := range p.Envs {
		if og := view.Guest(other.GuestId); other.Name != e.Name && og != nil && og.NodeId == g.NodeId {
			path = p.Name + "/" + e.Name
		}
	}
	return "ssh://git@" + net.JoinHostPort(n.Address, strconv.Itoa(int(n.GitPort))) + "/" + path
}

func (s *Service) view(view *state.Snap, p *corpusv1.Project) *corpusv1.ProjectView {
	out := &corpusv1.ProjectView{Project: p}
	for _, e := range p.Envs {
		ev := &corpusv1.ProjectEnvView{Name: e.Name, GuestName: e.GuestName, CurrentRelease: e.CurrentRelease, Domains: e.Domains, GitRemote: s.remote(view, p, e),
			Services: linkedServices(view, p.Name, e.Name), Scale: e.Scale, Instances: instanceViews(view, p, e)}
		if g := view.Guest(e.GuestId); g != nil {
			ev.GuestStatus = api.GuestStatus(view, g)
			if n := view.Node(g.NodeId); n != nil {
				ev.NodeName = n.Name
			}
		}
		out.Envs = append(out.Envs, ev)
	}
	return out
}

func (s *Service) ListProjects(ctx context.Context, _ *connect.Request[corpusv1.ListProjectsRequest]) (*connect.Response[corpusv1.ListProjectsResponse], error) {
	view := s.b.Store.Read()
	res := &corpusv1.ListProjectsResponse{}
	for _, p := range view.Projects() {
		if api.MayUseProject(ctx, p) == nil {
			res.Projects = append(res.Projects, s.view(view, p))
		}
	}
	return connect.NewResponse(res), nil
}

// GetProject answers at once, or with min_index blocks until the project
// or the guests of its environments change past it.
func (s *Service) GetProject(ctx context.Context, req *connect.Request[corpusv1.GetProjectRequest]) (*connect.Response[corpusv1.GetProjectResponse], error) {
	m := req.Msg
	if err := names.Validate("project", m.Name); err != nil {
		return nil, api.ToConnect(err)
	}
	wait := time.Duration(m.WaitSeconds) * time.Second
	if wait <= 0 || wait > api.MaxWait {
		wait = api.DefaultWait
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		view := s.b.Store.Read()
		p := view.Project(m.Name)
		if p == nil {
			return nil, api.ToConnect(api.NotFound("project", m.Name, "corpus project list"))
		}
		if err := api.MayUseProject(ctx, p); err != nil {
			return nil, err
		}
		idx := p.ModifyIndex
		for _, e := range p.Envs {
			if g := view.Guest(e.GuestId); g != nil && g.ModifyIndex > idx {
				idx = g.ModifyIndex
			}
			if g := view.Guest(e.GuestId); g != nil {
				if n := view.Node(g.NodeId); n != nil && n.ModifyIndex > idx {
					idx = n.ModifyIndex
				}
			}
		}
		if m.MinIndex == 0 || idx > m.MinIndex || view.Wait(ctx) != nil {
			return connect.NewResponse(&corpusv1.GetProjectResponse{Project: s.view(view, p), Index: idx}), nil
		}
	}
}

func (s *Service) DeleteProject(ctx context.Context, req *connect.Request[corpusv1.DeleteProjectRequest]) (*connect.Response[corpusv1.DeleteProjectResponse], error) {
	m := req.Msg
	if err := names.Validate("project", m.Name); err != nil {
		return nil, api.ToConnect(err)
	}
	if m.Env != "" {
		if err := api.ValidEnv(m.Env); err != nil {
			return nil, api.ToConnect(err)
		}
	}
	if s.b.Store.Read().Project(m.Name) == nil {
		return nil, api.ToConnect(api.NotFound("project", m.Name, "corpus project list"))
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_DeleteProject{DeleteProject: &corpusv1.DeleteProject{Name: m.Name, Env: m.Env, KeepVolumes: m.KeepVolumes}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.DeleteProjectResponse{}), nil
}

func (s *Service) GrantProject(ctx context.Context, req *connect.Request[corpusv1.GrantProjectRequest]) (*connect.Response[corpusv1.GrantProjectResponse], error) {
	m := req.Msg
	if err := names.Validate("project", m.Name); err != nil {
		return nil, api.ToConnect(err)
	}
	if err := names.Validate("user", m.User); err != nil {
		return nil, api.ToConnect(err)
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_GrantProject{GrantProject: &corpusv1.GrantProject{Name: m.Name, User: m.User, Revoke: m.Revoke}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.GrantProjectResponse{Project: s.b.Store.Read().Project(m.Name)}), nil
}

// ParseRelease reads "r3" or "3".
func ParseRelease(s string) (uint32, error) {
	n, ok := corpusv1.ParseReleaseName(s)
	if !ok {
		return 0, api.Invalidf("release %q: write it as r3 (see corpus release list)", s)
	}
	return n, nil
}

func (s *Service) ListReleases(ctx context.Context, req *connect.Request[corpusv1.ListReleasesRequest]) (*connect.Response[corpusv1.ListReleasesResponse], error) {
	view := s.b.Store.Read()
	p, e, err := api.PickEnv(ctx, view, req.Msg.Project, req.Msg.Env)
	if err != nil {
		return nil, err
	}
	rels := view.Releases(p.Name, e.Name)
	// The list leaves logs out; release show has them.
	return connect.NewResponse(&corpusv1.ListReleasesResponse{Releases: withoutLogs(rels), Current: e.CurrentRelease, Env: e.Name}), nil
}

func (s *Service) GetRelease(ctx context.Context, req *connect.Request[corpusv1.GetReleaseRequest]) (*connect.Response[corpusv1.GetReleaseResponse], error) {
	view := s.b.Store.Read()
	p, e, err := api.PickEnv(ctx, view, req.Msg.Project, req.Msg.Env)
	if err != nil {
		return nil, err
	}
	n, err := ParseRelease(req.Msg.Release)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	r := view.ReleaseByNumber(p.Name, e.Name, n)
	if r == nil {
		return nil, api.ToConnect(api.NotFound("release", corpusv1.ReleaseName(n), "corpus release list "+p.Name))
	}
	return connect.NewResponse(&corpusv1.GetReleaseResponse{Release: forClients(r), Current: n == e.CurrentRelease}), nil
}

// rollbackTarget picks the release a rollback goes to: the one asked for,
// or the newest good one before the current.
func rollbackTarget(view *state.Snap, p *corpusv1.Project, e *corpusv1.ProjectEnv, to uint32) (uint32, error) {
	rels := view.Releases(p.Name, e.Name)
	if to == 0 {
		for _, r := range rels {
			if r.Number < e.CurrentRelease && r.Status == corpusv1.ReleaseSucceeded && !r.Pruned {
				return r.Number, nil
			}
		}
		return 0, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s/%s has no kept good release before %s to roll back to", p.Name, e.Name, corpusv1.ReleaseName(e.CurrentRelease)))
	}
	r := view.ReleaseByNumber(p.Name, e.Name, to)
	switch {
	case r == nil:
		return 0, api.ToConnect(api.NotFound("release", corpusv1.ReleaseName(to), "corpus release list "+p.Name))
	case r.Status != corpusv1.ReleaseSucceeded:
		return 0, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("release %s %s; only succeeded releases can serve", corpusv1.ReleaseName(to), r.Status))
	case r.Pruned:
		return 0, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("release %s was pruned from the guest (keep more with keep: in .corpus/corpus.yaml)", corpusv1.ReleaseName(to)))
	}
	return to, nil
}

func (s *Service) Rollback(ctx context.Context, req *connect.Request[corpusv1.RollbackRequest], stream *connect.ServerStream[corpusv1.RollbackOutput]) error {
	view := s.b.Store.Read()
	p, e, err := api.PickEnv(ctx, view, req.Msg.Project, req.Msg.Env)
	if err != nil {
		return err
	}
	to, err := rollbackTarget(view, p, e, req.Msg.To)
	if err != nil {
		return err
	}
	if to == e.CurrentRelease {
		return stream.Send(&corpusv1.RollbackOutput{Done: true, Current: to,
			Output: []byte(fmt.Sprintf("%s is already the current release of %s/%s\n", corpusv1.ReleaseName(to), p.Name, e.Name))})
	}
	n, err := runningEnvNode(view, p, e)
	if err != nil {
		return err
	}
	up, err := s.b.AgentClient(n).Rollback(ctx, connect.NewRequest(&corpusv1.RollbackRequest{Project: p.Name, Env: e.Name, To: to, ProjectEnv: e}))
	// The agent's "done" is the first instance's; the caller hears it
	// once every instance serves the release (a caller leaves when it
	// reads "done", and the instances would then not be rolled at all).
	var done *corpusv1.RollbackOutput
	err = api.RelayFromAgent(n, "rollback", up, err, func(o *corpusv1.RollbackOutput) error {
		if o.Done && len(e.Instances) > 0 {
			done = o
			return nil
		}
		return stream.Send(o)
	})
	if err == nil && done != nil {
		var mu sync.Mutex
		if err = rollInstances(ctx, s.b, p, e, to, func(line string) {
			mu.Lock()
			defer mu.Unlock()
			stream.Send(&corpusv1.RollbackOutput{Output: []byte(line)})
		}); err == nil {
			err = stream.Send(done)
		}
	}
	// The node records the new current release as its own write; who
	// asked for it is recorded here.
	result := "ok: " + corpusv1.ReleaseName(to) + " is current"
	if err != nil {
		result = "failed: " + audit.ErrorText(err)
	}
	if aerr := s.b.Audit().Record(ctx, auth.FromContext(ctx).String(), "rollback", p.Name+"/"+e.Name, result); aerr != nil {
		s.b.Logger.Warn("recording a rollback in the audit log", "project", p.Name, "env", e.Name, "error", aerr)
	}
	return err
}

// Agent-side release calls.

// withoutLogs copies releases leaving their logs out.
func withoutLogs(rels []*corpusv1.Release) []*corpusv1.Release {
	out := make([]*corpusv1.Release, 0, len(rels))
	for _, r := range rels {
		c := forClients(r)
		c.Log = ""
		out = append(out, c)
	}
	return out
}

// forClients is a release as clients see it: its sealed config stays in
// the state (corpus config list shows what may be shown).
func forClients(r *corpusv1.Release) *corpusv1.Release {
	c := proto.Clone(r).(*corpusv1.Release)
	c.Config = nil
	return c
}

func (s *Agent) BeginRelease(ctx context.Context, req *connect.Request[corpusv1.BeginReleaseRequest]) (*connect.Response[corpusv1.BeginReleaseResponse], error) {
	m := req.Msg
	if err := validRelease(m.Project, m.Env); err != nil {
		return nil, api.ToConnect(err)
	}
	if m.Image != "" || m.ImageDigest != "" {
		if err := validImageRelease(s.b.Store.Read(), m.Commit, m.Image, m.ImageDigest); err != nil {
			return nil, api.ToConnect(err)
		}
	} else if !commitRE.MatchString(m.Commit) {
		return nil, api.ToConnect(api.Invalidf("commit %.80q: want a hex git object id", m.Commit))
	}
	if len(m.Subject) > 200 {
		m.Subject = strings.ToValidUTF8(m.Subject[:200], "")
	}
	for what, v := range map[string]string{"author": m.Author, "subject": m.Subject} {
		if err := api.ValidText(what, v, 200); err != nil {
			return nil, api.ToConnect(err)
		}
	}
	switch m.Trigger {
	case "":
		m.Trigger = corpusv1.TriggerPush
	case corpusv1.TriggerPush, corpusv1.TriggerConfig, corpusv1.TriggerRestart, corpusv1.TriggerDeploy:
	default:
		return nil, api.ToConnect(api.Invalidf("trigger %.40q: want push, config, restart or deploy", m.Trigger))
	}
	for _, proc := range m.Processes {
		if err := api.ValidProcessName(proc); err != nil {
			return nil, api.ToConnect(err)
		}
	}
	id := m.ReleaseId
	if id == "" {
		id = secret.Hex(8)
	} else if err := api.ValidID("release", id, "corpus release list"); err != nil {
		return nil, api.ToConnect(err)
	}
	r := &corpusv1.Release{Id: id, Project: m.Project, Env: m.Env, Commit: m.Commit, Author: m.Author, Subject: m.Subject,
		NodeId: auth.FromContext(ctx).NodeID, Trigger: m.Trigger, Processes: m.Processes, Image: m.Image, ImageDigest: m.ImageDigest}
	// What the config changed since the serving release, keys only, for
	// the record (the release takes the environment's config as it is).
	view := s.b.Store.Read()
	if p := view.Project(m.Project); p != nil {
		if e := corpusv1.EnvNamed(p, m.Env); e != nil {
			var before map[string][]byte
			if cur := view.ReleaseByNumber(p.Name, e.Name, e.CurrentRelease); cur != nil {
				before = cur.Config
			}
			changes, err := s.b.Keyring().Changes(view, p.Name, e.Name, before, e.Config)
			if err != nil {
				return nil, api.ToConnect(err)
			}
			r.ConfigChanges = changes
		}
	}
	_, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_BeginRelease{BeginRelease: &corpusv1.BeginRelease{Release: r}}})
	view = s.b.Store.Read()
	rel := view.Release(r.Id)
	if errors.Is(err, state.ErrExists) && m.ReleaseId != "" && rel.GetNodeId() == r.NodeId &&
		rel.GetProject() == m.Project && rel.GetEnv() == m.Env && rel.GetCommit() == m.Commit && rel.GetImageDigest() == m.ImageDigest {
		err = nil // asked again: the release it made
	}
	if err != nil {
		return nil, err
	}
	k, err := s.b.Keyring().Open(view)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	cfg, err := keyring.OpenConfig(k, m.Project, m.Env, rel.GetConfig())
	if err != nil {
		return nil, api.ToConnect(err)
	}
	return connect.NewResponse(&corpusv1.BeginReleaseResponse{Release: forClients(rel), Config: cfg}), nil
}

func (s *Agent) FinishRelease(ctx context.Context, req *connect.Request[corpusv1.FinishReleaseRequest]) (*connect.Response[corpusv1.FinishReleaseResponse], error) {
	m := req.Msg
	if err := api.ValidID("release", m.Id, "corpus release list"); err != nil {
		return nil, api.ToConnect(err)
	}
	if m.Status != corpusv1.ReleaseSucceeded && m.Status != corpusv1.ReleaseFailed {
		return nil, api.ToConnect(api.Invalidf("release status %.80q: want %s or %s", m.Status, corpusv1.ReleaseSucceeded, corpusv1.ReleaseFailed))
	}
	if err := api.ValidText("failed step", m.FailedStep, 200); err != nil {
		return nil, api.ToConnect(err)
	}
	log := m.Log
	if len(log) > maxReleaseLog {
		log = "[... " + strconv.Itoa(len(log)-maxReleaseLog) + " bytes cut ...]\n" + log[len(log)-maxReleaseLog:]
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_FinishRelease{FinishRelease: &corpusv1.FinishRelease{
		Id: m.Id, NodeId: auth.FromContext(ctx).NodeID, Status: m.Status, Steps: m.Steps, FailedStep: m.FailedStep, Message: m.Message, Log: log,
	}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.FinishReleaseResponse{Release: s.b.Store.Read().Release(m.Id)}), nil
}

func (s *Agent) SetCurrentRelease(ctx context.Context, req *connect.Request[corpusv1.SetCurrentReleaseRequest]) (*connect.Response[corpusv1.SetCurrentReleaseResponse], error) {
	m := req.Msg
	if err := validRelease(m.Project, m.Env); err != nil {
		return nil, api.ToConnect(err)
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetCurrentRelease{SetCurrentRelease: &corpusv1.SetCurrentRelease{
		Project: m.Project, Env: m.Env, Number: m.Number, NodeId: auth.FromContext(ctx).NodeID,
	}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.SetCurrentReleaseResponse{}), nil
}

func (s *Agent) PruneReleases(ctx context.Context, req *connect.Request[corpusv1.PruneReleasesRequest]) (*connect.Response[corpusv1.PruneReleasesResponse], error) {
	m := req.Msg
	if err := validRelease(m.Project, m.Env); err != nil {
		return nil, api.ToConnect(err)
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_PruneReleases{PruneReleases: &corpusv1.PruneReleases{
		Project: m.Project, Env: m.Env, Numbers: m.Numbers, NodeId: auth.FromContext(ctx).NodeID,
	}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.PruneReleasesResponse{}), nil
}

// maxManifestDomains bounds the extra domains of one environment.
const maxManifestDomains = 32

func (s *Agent) SetManifestDomains(ctx context.Context, req *connect.Request[corpusv1.SetManifestDomainsRequest]) (*connect.Response[corpusv1.SetManifestDomainsResponse], error) {
	m := req.Msg
	if len(m.Domains) > maxManifestDomains {
		return nil, api.ToConnect(api.Invalidf("%d domains; the limit is %d", len(m.Domains), maxManifestDomains))
	}
	var domains []string
	for _, given := range m.Domains {
		d, err := names.ParseDomain(given)
		if err != nil {
			return nil, api.ToConnect(err)
		}
		if !slices.Contains(domains, string(d)) {
			domains = append(domains, string(d))
		}
	}
	view := s.b.Store.Read()
	_, e, err := api.PickEnv(ctx, view, m.Project, m.Env)
	if err != nil {
		return nil, err
	}
	var routes []*corpusv1.Route
	for _, d := range domains {
		if r := view.RouteByDomain(d); r != nil && r.GuestId == e.GuestId {
			continue // routed here already
		}
		routes = append(routes, &corpusv1.Route{Id: secret.Hex(8), Kind: string(corpusv1.RouteHTTP), Domain: d, GuestId: e.GuestId, GuestPort: state.WebPort(e),
			Https: e.Https, RedirectHttps: e.Https})
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_SetManifestDomains{SetManifestDomains: &corpusv1.SetManifestDomains{
		Project: m.Project, Env: m.Env, NodeId: auth.FromContext(ctx).NodeID, Domains: domains, Routes: routes,
	}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.SetManifestDomainsResponse{}), nil
}

// linkedServices is what project show says of an environment's services.
func linkedServices(view *state.Snap, project, env string) []string {
	var out []string
	for _, svc := range view.LinksOf(project, env) {
		st := svc.Observed.GetState()
		if svc.ExternalUrl != "" {
			st = "external"
		} else if st == "" {
			st = "not started"
		}
		out = append(out, svc.Name+" ("+st+")")
	}
	return out
}
