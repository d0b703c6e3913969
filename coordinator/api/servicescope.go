package api

import (
	"context"
	"fmt"
	"net/url"

	"connectrpc.com/connect"

	"corpus/coordinator/auth"
	"corpus/coordinator/state"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// MayUseService checks the caller may use a service (see auth.Scope):
// ops, the users granted its project, and (to read it) those granted a
// project linked to it.
func MayUseService(ctx context.Context, view *state.Snap, svc *corpusv1.Service, write bool) error {
	sc := auth.ScopeOf(view, auth.FromContext(ctx))
	switch a := sc.Service(svc); {
	case a == auth.ReadWrite, a == auth.ReadOnly && !write:
		return nil
	case a == auth.ReadOnly:
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s may only read service %s (it is linked to a project granted to it, but belongs to %s)", sc.Principal(), svc.Name, projectOrNone(svc.Project)))
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s may not use service %s of %s (%w)", sc.Principal(), svc.Name, projectOrNone(svc.Project), errNotMember))
}

// projectOrNone names a service's project for an error.
func projectOrNone(project string) string {
	if project == "" {
		return "no project (operators' only)"
	}
	return "project " + project
}

// PickService returns a service the caller may use.
func PickService(ctx context.Context, view *state.Snap, name string, write bool) (*corpusv1.Service, error) {
	if err := names.Validate("service", name); err != nil {
		return nil, ToConnect(err)
	}
	svc := view.Service(name)
	if svc == nil {
		return nil, ToConnect(NotFound("service", name, "corpus service list"))
	}
	if err := MayUseService(ctx, view, svc, write); err != nil {
		return nil, err
	}
	return svc, nil
}

// CheckExternal validates an external service's endpoint and secrets.
func CheckExternal(m *corpusv1.CreateServiceRequest) error {
	u, err := url.Parse(m.ExternalUrl)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return Invalidf("external endpoint %q is not a URL with a scheme and a host (https://example.com)", m.ExternalUrl)
	}
	if m.Template != "" || m.Version != "" || m.SizeBytes != 0 || m.MemoryBytes != 0 || m.BackupSchedule != "" {
		return Invalidf("an external service has no template, version, size, memory or backups")
	}
	if err := CheckConfigChange(m.Secrets, nil); err != nil && len(m.Secrets) > 0 {
		return err
	}
	if _, clash := m.Secrets["URL"]; clash {
		return Invalidf("URL is the endpoint's own variable; give the secret another name")
	}
	return nil
}
