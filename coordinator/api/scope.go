package api

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	"corpus/coordinator/auth"
	"corpus/coordinator/state"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// Project scope (see auth.Scope): operators use every project; devs and
// viewers those granted to them (and viewers only to read, which the
// procedures' policies see to).

var errNotMember = errors.New("not granted")

// MayUseProject checks the caller may use project p.
func MayUseProject(ctx context.Context, p *corpusv1.Project) error {
	pr := auth.FromContext(ctx)
	if auth.ProjectAccess(pr, p) != auth.NoAccess {
		return nil
	}
	return connect.NewError(connect.CodePermissionDenied,
		fmt.Errorf("%s may not use project %s (%w; an operator grants it with `corpus project grant %s %s`)", pr, p.Name, errNotMember, p.Name, pr.User))
}

// MayUseGuest checks the caller may act on a guest (its logs included):
// devs only on the guests of projects granted to them and of services
// of those projects.
func MayUseGuest(ctx context.Context, view *state.Snap, g *corpusv1.Guest) error {
	sc := auth.ScopeOf(view, auth.FromContext(ctx))
	if sc.Guest(g) == auth.ReadWrite {
		return nil
	}
	// Say whose the guest is, and so what to ask for.
	if p, _ := view.ProjectOfGuest(g.Id); p != nil {
		if err := MayUseProject(ctx, p); err != nil {
			return err
		}
	} else if svc := view.ServiceOfGuest(g.Id); svc != nil {
		if err := MayUseService(ctx, view, svc, true); err != nil {
			return err
		}
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s may only act on the guests of projects granted to it and of their services; %s is not one", sc.Principal(), g.Name))
}

// MaySee checks the caller may read an object its scope gives access
// have to: what (guest, volume, ...) and name say which, for the
// refusal.
func MaySee(ctx context.Context, have auth.Access, what, name string) error {
	if have != auth.NoAccess {
		return nil
	}
	pr := auth.FromContext(ctx)
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s may not see %s %s: it belongs to no project granted to it (%w)", pr, what, name, errNotMember))
}

// PickEnv resolves the environment a request means: the named one, or the
// project's only one.
func PickEnv(ctx context.Context, view *state.Snap, project, env string) (*corpusv1.Project, *corpusv1.ProjectEnv, error) {
	if err := names.Validate("project", project); err != nil {
		return nil, nil, ToConnect(err)
	}
	if env != "" {
		if err := ValidEnv(env); err != nil {
			return nil, nil, ToConnect(err)
		}
	}
	p := view.Project(project)
	if p == nil {
		return nil, nil, ToConnect(NotFound("project", project, "corpus project list"))
	}
	if err := MayUseProject(ctx, p); err != nil {
		return nil, nil, err
	}
	if env == "" {
		if len(p.Envs) != 1 {
			var all []string
			for _, e := range p.Envs {
				all = append(all, e.Name)
			}
			return nil, nil, ToConnect(Invalidf("project %s has environments %s: choose one with --env", p.Name, strings.Join(all, ", ")))
		}
		return p, p.Envs[0], nil
	}
	e := corpusv1.EnvNamed(p, env)
	if e == nil {
		return nil, nil, ToConnect(NotFound("environment", project+"/"+env, "corpus project show "+project))
	}
	return p, e, nil
}
