package projects

import (
	"context"
	"fmt"

	"corpus/coordinator/api"

	"connectrpc.com/connect"

	"corpus/coordinator/auth"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// The node's git and SSH endpoint asks who may push, fetch or open a
// shell.

// GitAccess decides whether an SSH key's owner may push to (or fetch
// from, or open a shell in) a project environment hosted by the calling
// node, as the user's role and grants say (auth.ProjectAccess). A
// refusal for a project is in the audit log, as the API's refusals are
// (the check of a key alone is not: an SSH client offers its keys in
// turn, and a key it was refused is the handshake trying the next).
func (s *Agent) GitAccess(ctx context.Context, req *connect.Request[corpusv1.GitAccessRequest]) (*connect.Response[corpusv1.GitAccessResponse], error) {
	m := req.Msg
	node := auth.FromContext(ctx)
	view := s.b.Store.Read()
	res := &corpusv1.GitAccessResponse{}
	actor, target := string(auth.Anonymous), ""
	deny := func(format string, args ...any) (*connect.Response[corpusv1.GitAccessResponse], error) {
		res.Allowed = false
		res.Reason = fmt.Sprintf(format, args...)
		if m.Project != "" {
			s.b.Audit().Refusal(ctx, actor, gitAction(m), target, res.Reason+" (over ssh, node "+node.NodeName+")")
		}
		return connect.NewResponse(res), nil
	}
	u := view.UserByFingerprint(m.Fingerprint)
	var pr auth.Principal
	if u != nil {
		pr = auth.UserPrincipal(u)
		actor, res.User, res.Role = pr.String(), u.Name, u.Role
	}
	if u != nil && m.Project != "" {
		// A session's command (the handshake checked the key, the
		// client then proved it holds it): the key's last use.
		s.b.KeyUsed(m.Fingerprint, m.From)
	}
	if m.Project != "" {
		if names.Validate("project", m.Project) != nil || (m.Env != "" && api.ValidEnv(m.Env) != nil) {
			return deny("%.64q is not a project[/env] name", gitTarget(m))
		}
		target = gitTarget(m)
	}
	if u == nil {
		return deny("key %.80s belongs to no user (an operator adds it with `corpus key add USER FILE`)", m.Fingerprint)
	}
	if m.Project == "" {
		res.Allowed = true
		return connect.NewResponse(res), nil
	}
	p := view.Project(m.Project)
	if p == nil {
		return deny("no project named %q", m.Project)
	}
	var here []*corpusv1.ProjectEnv
	for _, e := range p.Envs {
		if g := view.Guest(e.GuestId); g != nil && g.NodeId == node.NodeID && (m.Env == "" || e.Name == m.Env) {
			here = append(here, e)
		}
	}
	switch {
	case len(here) == 0 && m.Env != "":
		return deny("project %s has no %s environment on this node", p.Name, m.Env)
	case len(here) == 0:
		return deny("project %s has no environment on this node (see `corpus project show %s` for its remotes)", p.Name, p.Name)
	case len(here) > 1:
		return deny("project %s has several environments on this node: push to %s/ENV", p.Name, p.Name)
	}
	switch a := auth.ProjectAccess(pr, p); {
	case a == auth.ReadWrite:
	case a == auth.ReadOnly && !m.Write && !m.Shell:
	case a == auth.ReadOnly && m.Shell:
		return deny("user %s is a viewer and may not open shells", u.Name)
	case a == auth.ReadOnly:
		return deny("user %s is a viewer and may not push", u.Name)
	default:
		return deny("user %s may not use project %s (an operator grants it with `corpus project grant %s %s`)", u.Name, p.Name, p.Name, u.Name)
	}
	res.Allowed = true
	res.Project = p
	res.Env = here[0]
	res.Releases = withoutLogs(view.Releases(p.Name, here[0].Name))
	return connect.NewResponse(res), nil
}

// gitAction names what a GitAccess asked for, as the audit log says it.
func gitAction(m *corpusv1.GitAccessRequest) string {
	switch {
	case m.Shell:
		return "refused ssh shell"
	case m.Write:
		return "refused git push"
	}
	return "refused git fetch"
}

// gitTarget is the project environment a GitAccess is about.
func gitTarget(m *corpusv1.GitAccessRequest) string {
	if m.Env == "" {
		return m.Project
	}
	return m.Project + "/" + m.Env
}
