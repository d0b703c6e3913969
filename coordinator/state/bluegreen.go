package state

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// Blue-green: a deploy starts the new release beside the serving one on
// every instance (staged), then one SwitchEnv points every instance's web
// port (the routes' targets) at it at once; the release before keeps
// running on every instance, its ports kept as the standby's, so a
// switch back is one write too. A new release ends the standby.

func (a *applier) switchEnv(c *corpusv1.SwitchEnv) error {
	p, env, err := a.projectEnv(c.Project, c.Env)
	if err != nil {
		return err
	}
	if c.Back {
		return a.switchBack(p, env)
	}
	g := a.get(statedb.TableGuests, "id", env.GuestId)
	if g == nil || g.(*corpusv1.Guest).NodeId != c.NodeId {
		return fmt.Errorf("the first instance of %s/%s is not on this node: %w", p.Name, env.Name, ErrBadTransition)
	}
	if c.WebPort < 1 || c.WebPort > 65535 || c.Release == 0 {
		return fmt.Errorf("switch without release or web port: %w", ErrInvalid)
	}
	if a.view().ReleaseByNumber(p.Name, env.Name, c.Release) == nil {
		return fmt.Errorf("release %s of %s/%s: %w", corpusv1.ReleaseName(c.Release), p.Name, env.Name, ErrNotFound)
	}
	for _, in := range env.Instances {
		port := c.InstancePorts[in.Index]
		if in.StagedRelease != c.Release || port < 1 || port > 65535 {
			return fmt.Errorf("instance %d of %s/%s has not staged %s: %w", in.Index, p.Name, env.Name, corpusv1.ReleaseName(c.Release), ErrBadTransition)
		}
	}
	env.StandbyRelease, env.StandbyWebPort, env.StandbyUntil = env.CurrentRelease, WebPort(env), c.KeepUntil
	env.CurrentRelease = c.Release
	env.WebPort = c.WebPort
	for _, in := range env.Instances {
		in.StandbyWebPort = in.WebPort
		if in.StandbyWebPort == 0 {
			in.StandbyWebPort = env.HttpPort
		}
		in.WebPort, in.Release, in.StagedRelease = c.InstancePorts[in.Index], c.Release, 0
	}
	a.pointRoutes(env)
	a.putEnv(p, env)
	return nil
}

// switchBack swaps the serving and the standby releases of env.
func (a *applier) switchBack(p *corpusv1.Project, env *corpusv1.ProjectEnv) error {
	if env.StandbyRelease == 0 {
		return fmt.Errorf("%s/%s has no release standing by (a blue-green deploy leaves one): %w", p.Name, env.Name, ErrBadTransition)
	}
	if env.StandbyUntil != nil && !a.now.AsTime().Before(env.StandbyUntil.AsTime()) {
		return fmt.Errorf("%s/%s's standby %s expired at %s and its processes are stopped: roll back instead: %w",
			p.Name, env.Name, corpusv1.ReleaseName(env.StandbyRelease), env.StandbyUntil.AsTime().UTC().Format("15:04:05"), ErrBadTransition)
	}
	env.CurrentRelease, env.StandbyRelease = env.StandbyRelease, env.CurrentRelease
	web := WebPort(env)
	env.WebPort, env.StandbyWebPort = env.StandbyWebPort, web
	for _, in := range env.Instances {
		web := in.WebPort
		if web == 0 {
			web = env.HttpPort
		}
		in.WebPort, in.StandbyWebPort = in.StandbyWebPort, web
		in.Release = env.CurrentRelease
	}
	a.pointRoutes(env)
	a.putEnv(p, env)
	return nil
}

// endStandby forgets an environment's standby (a new release began).
func endStandby(env *corpusv1.ProjectEnv) {
	env.StandbyRelease, env.StandbyWebPort, env.StandbyUntil = 0, 0, nil
	for _, in := range env.Instances {
		in.StandbyWebPort, in.StagedRelease = 0, 0
	}
}

// pointRoutes points the environment's http routes at its web port.
func (a *applier) pointRoutes(env *corpusv1.ProjectEnv) {
	port := WebPort(env)
	for _, d := range append(slices.Clone(env.Domains), env.ManifestDomains...) {
		raw := a.get(statedb.TableRoutes, "domain", d)
		if raw == nil {
			continue
		}
		r := raw.(*corpusv1.Route)
		if r.GuestId != env.GuestId || !r.Is(corpusv1.RouteHTTP) || r.GuestPort == port {
			continue
		}
		r = proto.Clone(r).(*corpusv1.Route)
		r.GuestPort = port
		r.ModifyIndex = a.index
		a.put(statedb.TableRoutes, r)
	}
}
