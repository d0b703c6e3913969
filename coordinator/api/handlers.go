package api

import (
	"context"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Services is the service handlers as a project's import uses them
// (package services).
type Services interface {
	corpusv1connect.ServiceServiceHandler
	// TemplateGuest fills in svc, made from a template as m asks, and
	// returns its guest and its generated credentials; its errors say
	// what of m a create would refuse.
	TemplateGuest(svc *corpusv1.Service, m *corpusv1.CreateServiceRequest) (*corpusv1.Guest, map[string]string, error)
	// LinkEnv is what a link named as gives a project: the variables of
	// svc as seen in view.
	LinkEnv(view *state.Snap, svc *corpusv1.Service, as string) (map[string]string, error)
	// WriteLink records a link of a service with the variables vars,
	// sealed for the environment.
	WriteLink(ctx context.Context, service, project, env, as string, vars map[string]string) error
}

// Releases is how a service's link makes releases of the project
// environments it changed (package projects).
type Releases interface {
	// ReleaseConfig makes a release of an environment's current commit
	// with its config now, described by what, and streams its output to
	// send, unless noRestart or nothing is deployed yet.
	ReleaseConfig(ctx context.Context, project, env, what string, noRestart bool, send func(*corpusv1.DeployOutput) error) error
}
