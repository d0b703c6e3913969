package state

import (
	"fmt"
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/compat"
	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// maxReleaseRecords bounds the release history kept per environment; the
// oldest pruned records go first.
const maxReleaseRecords = 100

// Users, projects and releases: who may push, what they push to, and what
// each push became.

func validRole(role string) bool {
	switch role {
	case corpusv1.RoleOps, corpusv1.RoleDev, corpusv1.RoleViewer:
		return true
	}
	return false
}

func (a *applier) user(name string) (*corpusv1.User, error) {
	raw := a.get(statedb.TableUsers, "id", name)
	if raw == nil {
		return nil, fmt.Errorf("user %s: %w", name, ErrNotFound)
	}
	return proto.Clone(raw.(*corpusv1.User)).(*corpusv1.User), nil
}

func (a *applier) createUser(c *corpusv1.CreateUser) error {
	u := c.User
	if u == nil || u.Name == "" || !validRole(u.Role) {
		return fmt.Errorf("user without name or with role %q (want ops, dev or viewer): %w", u.GetRole(), ErrInvalid)
	}
	if u.Auth != "" && u.Auth != corpusv1.AuthLDAP {
		return fmt.Errorf("user %s with auth %q (want none or ldap): %w", u.Name, u.Auth, ErrInvalid)
	}
	if a.get(statedb.TableUsers, "id", u.Name) != nil {
		return fmt.Errorf("user %s: %w", u.Name, ErrExists)
	}
	u = proto.Clone(u).(*corpusv1.User)
	u.Keys = nil
	u.CreatedAt = a.now
	u.CreateIndex, u.ModifyIndex = a.index, a.index
	a.put(statedb.TableUsers, u)
	return nil
}

func (a *applier) deleteUser(c *corpusv1.DeleteUser) error {
	u, err := a.user(c.Name)
	if err != nil {
		return err
	}
	for _, p := range a.view().Projects() {
		if i := slices.Index(p.Members, u.Name); i >= 0 {
			p = proto.Clone(p).(*corpusv1.Project)
			p.Members = append(p.Members[:i], p.Members[i+1:]...)
			p.ModifyIndex = a.index
			a.put(statedb.TableProjects, p)
		}
	}
	a.deleteUserTokens(u.Name)
	if err := a.txn.Delete(statedb.TableUsers, u); err != nil {
		panic(fmt.Sprintf("state: deleting user: %v", err))
	}
	return nil
}

func (a *applier) addSSHKey(c *corpusv1.AddSshKey) error {
	u, err := a.user(c.User)
	if err != nil {
		return err
	}
	k := c.Key
	if k == nil || k.Fingerprint == "" || k.PublicKey == "" {
		return fmt.Errorf("ssh key without fingerprint: %w", ErrInvalid)
	}
	if owner := a.view().UserByFingerprint(k.Fingerprint); owner != nil {
		return fmt.Errorf("key %s belongs to user %s: %w", k.Fingerprint, owner.Name, ErrExists)
	}
	k = proto.Clone(k).(*corpusv1.SshKey)
	k.AddedAt = a.now
	u.Keys = append(u.Keys, k)
	u.ModifyIndex = a.index
	a.put(statedb.TableUsers, u)
	return nil
}

func (a *applier) deleteSSHKey(c *corpusv1.DeleteSshKey) error {
	u, err := a.user(c.User)
	if err != nil {
		return err
	}
	for i, k := range u.Keys {
		if k.Fingerprint == c.Fingerprint {
			u.Keys = append(u.Keys[:i], u.Keys[i+1:]...)
			u.ModifyIndex = a.index
			a.put(statedb.TableUsers, u)
			return nil
		}
	}
	return fmt.Errorf("key %s of user %s: %w", c.Fingerprint, u.Name, ErrNotFound)
}

func (a *applier) project(name string) (*corpusv1.Project, error) {
	raw := a.get(statedb.TableProjects, "name", name)
	if raw == nil {
		return nil, fmt.Errorf("project %s: %w", name, ErrNotFound)
	}
	return proto.Clone(raw.(*corpusv1.Project)).(*corpusv1.Project), nil
}

// createProject adds an environment to a project, creating the project
// when it is new: the environment's guest and the routes of its domains
// are created in the same step, so a half-made project never exists.
func (a *applier) createProject(c *corpusv1.CreateProject) error {
	env := c.Env
	if c.Name == "" || env == nil || env.Name == "" || c.Guest == nil {
		return fmt.Errorf("project without name, environment or guest: %w", ErrInvalid)
	}
	p, err := a.project(c.Name)
	if err != nil {
		if c.ProjectId == "" {
			return fmt.Errorf("new project without id: %w", ErrInvalid)
		}
		p = &corpusv1.Project{Id: c.ProjectId, Name: c.Name, CreatedAt: a.now, CreateIndex: a.index}
	}
	if corpusv1.EnvNamed(p, env.Name) != nil {
		return fmt.Errorf("project %s already has environment %s: %w", p.Name, env.Name, ErrExists)
	}
	if err := a.createGuest(&corpusv1.CreateGuest{Guest: c.Guest}); err != nil {
		return err
	}
	for _, r := range c.Routes {
		if err := a.createRoute(&corpusv1.CreateRoute{Route: r}); err != nil {
			return err
		}
	}
	env = proto.Clone(env).(*corpusv1.ProjectEnv)
	env.GuestId, env.GuestName = c.Guest.Id, c.Guest.Name
	env.CurrentRelease, env.LastRelease = 0, 0
	p.Envs = append(p.Envs, env)
	sort.Slice(p.Envs, func(i, j int) bool { return envOrder(p.Envs[i].Name) < envOrder(p.Envs[j].Name) })
	p.Admission = append(p.Admission, c.Admission...)
	p.ModifyIndex = a.index
	a.put(statedb.TableProjects, p)
	return nil
}

func envOrder(name string) int {
	switch name {
	case corpusv1.EnvDev:
		return 0
	case corpusv1.EnvStaging:
		return 1
	case corpusv1.EnvProd:
		return 2
	}
	return 3
}

// deleteProject deletes one environment (or all): its guest goes with its
// volume, and its release history is forgotten. A project without
// environments is removed.
func (a *applier) deleteProject(c *corpusv1.DeleteProject) error {
	p, err := a.project(c.Name)
	if err != nil {
		return err
	}
	if c.Env != "" && corpusv1.EnvNamed(p, c.Env) == nil {
		return fmt.Errorf("environment %s of project %s: %w", c.Env, p.Name, ErrNotFound)
	}
	var keep []*corpusv1.ProjectEnv
	for _, env := range p.Envs {
		if c.Env != "" && env.Name != c.Env {
			keep = append(keep, env)
			continue
		}
		for _, in := range Instances(env) {
			if g := a.get(statedb.TableGuests, "id", in.GuestID); g != nil && g.(*corpusv1.Guest).DesiredState != DesiredDeleted {
				// Only instance 1's data may be kept: the others' volumes
				// hold nothing another instance needs.
				if err := a.setGuestDesired(&corpusv1.SetGuestDesired{Name: g.(*corpusv1.Guest).Name, DesiredState: DesiredDeleted, PurgeVolume: !c.KeepVolumes || in.Index > 1}); err != nil {
					return err
				}
			}
		}
		if _, err := a.txn.DeleteAll(statedb.TableReleases, "env", p.Name, env.Name); err != nil {
			panic(fmt.Sprintf("state: deleting releases: %v", err))
		}
		a.dropLinks(p.Name, env.Name)
	}
	if len(keep) == 0 {
		if err := a.txn.Delete(statedb.TableProjects, p); err != nil {
			panic(fmt.Sprintf("state: deleting project: %v", err))
		}
		return nil
	}
	p.Envs = keep
	p.ModifyIndex = a.index
	a.put(statedb.TableProjects, p)
	return nil
}

func (a *applier) grantProject(c *corpusv1.GrantProject) error {
	p, err := a.project(c.Name)
	if err != nil {
		return err
	}
	if _, err := a.user(c.User); err != nil && !c.Revoke {
		return err
	}
	i := slices.Index(p.Members, c.User)
	switch {
	case c.Revoke && i >= 0:
		p.Members = append(p.Members[:i], p.Members[i+1:]...)
	case !c.Revoke && i < 0:
		p.Members = append(p.Members, c.User)
		sort.Strings(p.Members)
	default:
		return nil // already so
	}
	p.ModifyIndex = a.index
	a.put(statedb.TableProjects, p)
	return nil
}

// envOnNode returns a project environment whose guest the node hosts.
func (a *applier) envOnNode(project, env, nodeID string) (*corpusv1.Project, *corpusv1.ProjectEnv, error) {
	p, e, err := a.projectEnv(project, env)
	if err != nil {
		return nil, nil, err
	}
	g := a.get(statedb.TableGuests, "id", e.GuestId)
	if g == nil || g.(*corpusv1.Guest).NodeId != nodeID {
		return nil, nil, fmt.Errorf("the guest of %s/%s is not on this node: %w", project, env, ErrBadTransition)
	}
	return p, e, nil
}

func (a *applier) beginRelease(c *corpusv1.BeginRelease) error {
	r := c.Release
	// A release from an image has an image (and the digest it resolved
	// to, unless its pull failed) instead of a commit, once every replica
	// can store one (a replica of before refuses it).
	fromImage := r.GetImage() != "" && a.allows(compat.ImageReleases)
	if r == nil || r.Id == "" || (r.Commit == "") == !fromImage {
		return fmt.Errorf("release without id, or without exactly one of commit and image: %w", ErrInvalid)
	}
	p, env, err := a.envOnNode(r.Project, r.Env, r.NodeId)
	if err != nil {
		return err
	}
	if a.get(statedb.TableReleases, "id", r.Id) != nil {
		return fmt.Errorf("release %s: %w", r.Id, ErrExists)
	}
	// The node's agent runs one deploy of an environment at a time, so a
	// release still "deploying" when it begins another was cut short.
	for _, old := range a.view().Releases(p.Name, env.Name) {
		if old.Status == corpusv1.ReleaseDeploying {
			old = proto.Clone(old).(*corpusv1.Release)
			old.Status = corpusv1.ReleaseFailed
			old.Message = "interrupted: the deploy never finished"
			old.FinishedAt = a.now
			old.ModifyIndex = a.index
			a.put(statedb.TableReleases, old)
		}
	}
	env.LastRelease++
	endStandby(env)
	r = proto.Clone(r).(*corpusv1.Release)
	r.Number = env.LastRelease
	r.Status = corpusv1.ReleaseDeploying
	r.StartedAt = a.now
	r.FinishedAt = nil
	r.Pruned = false
	// The release runs with the config as it is now.
	r.Config = env.Config
	if r.Trigger == "" {
		r.Trigger = corpusv1.TriggerPush
	}
	r.CreateIndex, r.ModifyIndex = a.index, a.index
	a.put(statedb.TableReleases, r)
	a.putEnv(p, env)
	return nil
}

func (a *applier) putEnv(p *corpusv1.Project, env *corpusv1.ProjectEnv) {
	for i, e := range p.Envs {
		if e.Name == env.Name {
			p.Envs[i] = env
		}
	}
	p.ModifyIndex = a.index
	a.put(statedb.TableProjects, p)
}

func (a *applier) release(id string) (*corpusv1.Release, error) {
	raw := a.get(statedb.TableReleases, "id", id)
	if raw == nil {
		return nil, fmt.Errorf("release %s: %w", id, ErrNotFound)
	}
	return proto.Clone(raw.(*corpusv1.Release)).(*corpusv1.Release), nil
}

func (a *applier) finishRelease(c *corpusv1.FinishRelease) error {
	r, err := a.release(c.Id)
	if err != nil {
		return err
	}
	if r.NodeId != c.NodeId {
		return fmt.Errorf("release %s was deployed by another node: %w", c.Id, ErrBadTransition)
	}
	switch c.Status {
	case corpusv1.ReleaseSucceeded, corpusv1.ReleaseFailed:
	default:
		return fmt.Errorf("release status %q: %w", c.Status, ErrInvalid)
	}
	if r.Status != corpusv1.ReleaseDeploying {
		if r.Status == c.Status {
			return nil // said twice (a retried call)
		}
		return fmt.Errorf("release %s already %s: %w", corpusv1.ReleaseName(r.Number), r.Status, ErrBadTransition)
	}
	r.Status = c.Status
	r.Steps = c.Steps
	r.FailedStep = c.FailedStep
	r.Message = c.Message
	r.Log = c.Log
	r.FinishedAt = a.now
	r.ModifyIndex = a.index
	a.put(statedb.TableReleases, r)
	if c.Status != corpusv1.ReleaseSucceeded && r.Trigger != corpusv1.TriggerConfig {
		return nil
	}
	p, env, err := a.envOnNode(r.Project, r.Env, c.NodeId)
	switch {
	case err != nil && c.Status == corpusv1.ReleaseSucceeded:
		return err
	case err != nil:
		return nil // the environment moved on; nothing of it to undo here
	case c.Status == corpusv1.ReleaseSucceeded:
		env.CurrentRelease = r.Number
		a.putEnv(p, env)
	default:
		// A config change whose release failed is undone: the config is
		// again the one the serving release runs with.
		env.Config = nil
		if cur := a.view().ReleaseByNumber(p.Name, env.Name, env.CurrentRelease); cur != nil {
			env.Config = cur.Config
		}
		a.putEnv(p, env)
	}
	return nil
}

func (a *applier) setCurrentRelease(c *corpusv1.SetCurrentRelease) error {
	p, env, err := a.envOnNode(c.Project, c.Env, c.NodeId)
	if err != nil {
		return err
	}
	r := a.view().ReleaseByNumber(p.Name, env.Name, c.Number)
	if r == nil {
		return fmt.Errorf("release %s of %s/%s: %w", corpusv1.ReleaseName(c.Number), p.Name, env.Name, ErrNotFound)
	}
	if r.Status != corpusv1.ReleaseSucceeded || r.Pruned {
		return fmt.Errorf("release %s is %s%s and cannot serve: %w", corpusv1.ReleaseName(c.Number), r.Status, map[bool]string{true: " and pruned"}[r.Pruned], ErrBadTransition)
	}
	if env.CurrentRelease != c.Number {
		endStandby(env) // a rollback replaces the processes: nothing stands by
	}
	if env.CurrentRelease == c.Number {
		return nil
	}
	// A release serves with its own config: rolling back restores it.
	env.CurrentRelease = c.Number
	env.Config = r.Config
	a.putEnv(p, env)
	return nil
}

func (a *applier) pruneReleases(c *corpusv1.PruneReleases) error {
	p, env, err := a.envOnNode(c.Project, c.Env, c.NodeId)
	if err != nil {
		return err
	}
	for _, n := range c.Numbers {
		if n == env.CurrentRelease {
			return fmt.Errorf("release %s is current and cannot be pruned: %w", corpusv1.ReleaseName(n), ErrBadTransition)
		}
		r := a.view().ReleaseByNumber(p.Name, env.Name, n)
		if r == nil || r.Pruned {
			continue
		}
		r = proto.Clone(r).(*corpusv1.Release)
		r.Pruned = true
		r.ModifyIndex = a.index
		a.put(statedb.TableReleases, r)
	}
	// Forget the oldest pruned records beyond the history bound.
	all := a.view().Releases(p.Name, env.Name)
	for i := len(all) - 1; i >= maxReleaseRecords; i-- {
		if all[i].Pruned {
			if err := a.txn.Delete(statedb.TableReleases, all[i]); err != nil {
				panic(fmt.Sprintf("state: deleting release: %v", err))
			}
		}
	}
	return nil
}

// setManifestDomains replaces an environment's extra domains: dropped
// ones lose their routes, new ones get the routes the command carries.
// A domain routed elsewhere fails the whole command.
func (a *applier) setManifestDomains(c *corpusv1.SetManifestDomains) error {
	p, env, err := a.envOnNode(c.Project, c.Env, c.NodeId)
	if err != nil {
		return err
	}
	for _, d := range env.ManifestDomains {
		if slices.Contains(c.Domains, d) || slices.Contains(env.Domains, d) {
			continue
		}
		if raw := a.get(statedb.TableRoutes, "domain", d); raw != nil && raw.(*corpusv1.Route).GuestId == env.GuestId {
			if err := a.txn.Delete(statedb.TableRoutes, raw); err != nil {
				panic(fmt.Sprintf("state: deleting route: %v", err))
			}
		}
	}
	for _, r := range c.Routes {
		if r.GuestId != env.GuestId || !r.Is(corpusv1.RouteHTTP) || !slices.Contains(c.Domains, r.Domain) {
			return fmt.Errorf("route %s is not one of the environment's domains: %w", r.Domain, ErrInvalid)
		}
		if err := a.createRoute(&corpusv1.CreateRoute{Route: r}); err != nil {
			return err
		}
	}
	env.ManifestDomains = c.Domains
	a.putEnv(p, env)
	return nil
}
