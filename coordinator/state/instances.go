package state

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// Instances: an environment runs as many guests as its largest process
// count (corpus scale). Instance 1 is the environment's own guest, the one
// pushes go to and releases are built on; instances 2… are guests of the
// same spec, each serving the release its record names (rolled forward one
// by one by a deploy), each with its own web port. The proxy balances an
// environment's domains over the web of every instance.

// MaxInstances bounds an environment's instances.
const MaxInstances = 100

func (a *applier) scaleEnv(c *corpusv1.ScaleEnv) error {
	p, env, err := a.projectEnv(c.Project, c.Env)
	if err != nil {
		return err
	}
	if have := uint32(len(env.Instances)) + 1; have != c.ExpectInstances {
		return fmt.Errorf("%s/%s has %d instances now, not %d (scaled meanwhile): %w", c.Project, c.Env, have, c.ExpectInstances, ErrStale)
	}
	want := corpusv1.InstanceCount(c.Scale)
	if want > MaxInstances {
		return fmt.Errorf("%d instances (at most %d): %w", want, MaxInstances, ErrInvalid)
	}
	if uint32(len(env.Instances))+1+uint32(len(c.Add))-uint32(len(c.Remove)) != want {
		return fmt.Errorf("scaling %s/%s to %d instances: %d added and %d removed do not add up: %w", c.Project, c.Env, want, len(c.Add), len(c.Remove), ErrInvalid)
	}
	if want > 1 && !c.SharedNothing && a.keepsData(env) {
		return fmt.Errorf("%s/%s keeps its data on a volume, which only one instance may write: %w", c.Project, c.Env, ErrBadTransition)
	}
	for _, idx := range c.Remove {
		i := slices.IndexFunc(env.Instances, func(in *corpusv1.ProjectInstance) bool { return in.Index == idx })
		if i < 0 || idx <= want {
			return fmt.Errorf("removing instance %d of %s/%s: %w", idx, c.Project, c.Env, ErrInvalid)
		}
		in := env.Instances[i]
		if raw := a.get(statedb.TableGuests, "id", in.GuestId); raw != nil && raw.(*corpusv1.Guest).DesiredState != DesiredDeleted {
			if err := a.setGuestDesired(&corpusv1.SetGuestDesired{Name: in.GuestName, DesiredState: DesiredDeleted, PurgeVolume: true}); err != nil {
				return err
			}
		}
		env.Instances = slices.Delete(env.Instances, i, i+1)
	}
	next := uint32(len(env.Instances)) + 2
	for _, g := range c.Add {
		if g.GetName() != corpusv1.InstanceGuestName(c.Project, c.Env, next) {
			return fmt.Errorf("instance %d of %s/%s must be guest %s, not %s: %w", next, c.Project, c.Env, corpusv1.InstanceGuestName(c.Project, c.Env, next), g.GetName(), ErrInvalid)
		}
		if err := a.createGuest(&corpusv1.CreateGuest{Guest: g}); err != nil {
			return err
		}
		env.Instances = append(env.Instances, &corpusv1.ProjectInstance{Index: next, GuestId: g.Id, GuestName: g.Name, Release: env.CurrentRelease})
		next++
	}
	env.Scale = maps.Clone(c.Scale)
	env.SharedNothing = c.SharedNothing
	if c.MaxParallel > 0 {
		env.MaxParallel = c.MaxParallel
	}
	if pol := env.Autoscale[c.Autoscaled]; pol != nil {
		pol.LastDecision, pol.LastDecisionAt = c.Reason, a.now
	}
	a.putEnv(p, env)
	return nil
}

// projectEnv returns a project (a copy to change) and its environment.
func (a *applier) projectEnv(project, env string) (*corpusv1.Project, *corpusv1.ProjectEnv, error) {
	p, err := a.project(project)
	if err != nil {
		return nil, nil, err
	}
	e := corpusv1.EnvNamed(p, env)
	if e == nil {
		return nil, nil, fmt.Errorf("environment %s of project %s: %w", env, project, ErrNotFound)
	}
	return p, e, nil
}

// ValidAutoscale says what is wrong with a policy, "" when nothing.
func ValidAutoscale(p *corpusv1.AutoscalePolicy) string {
	switch {
	case p.GetMin() < 1:
		return "--min must be 1 or more"
	case p.GetMax() < p.GetMin():
		return fmt.Sprintf("--max %d is below --min %d", p.GetMax(), p.GetMin())
	case p.GetMax() > MaxInstances:
		return fmt.Sprintf("--max %d: at most %d instances", p.GetMax(), MaxInstances)
	case (p.GetTargetCpuPercent() > 0) == (p.GetTargetRps() > 0):
		return "give one target: --target-cpu or --target-rps"
	case p.GetTargetCpuPercent() > 100:
		return fmt.Sprintf("--target-cpu %d%%: at most 100%%", p.GetTargetCpuPercent())
	case p.GetScaleDownWindowSeconds() > 3600:
		return "--scale-down-window: at most 1h"
	}
	return ""
}

func (a *applier) setAutoscale(c *corpusv1.SetAutoscale) error {
	p, env, err := a.projectEnv(c.Project, c.Env)
	if err != nil {
		return err
	}
	if c.Policy == nil {
		if env.Autoscale[c.Process] == nil {
			return nil
		}
		delete(env.Autoscale, c.Process)
	} else {
		if why := ValidAutoscale(c.Policy); why != "" {
			return fmt.Errorf("autoscale %s: %s: %w", c.Process, why, ErrInvalid)
		}
		if env.Autoscale == nil {
			env.Autoscale = map[string]*corpusv1.AutoscalePolicy{}
		}
		pol := proto.Clone(c.Policy).(*corpusv1.AutoscalePolicy)
		pol.LastDecision, pol.LastDecisionAt = "", nil
		if old := env.Autoscale[c.Process]; old != nil {
			pol.LastDecision, pol.LastDecisionAt = old.LastDecision, old.LastDecisionAt
		}
		env.Autoscale[c.Process] = pol
	}
	a.putEnv(p, env)
	return nil
}

// keepsData says whether an environment's guest has a data volume.
func (a *applier) keepsData(env *corpusv1.ProjectEnv) bool {
	raw := a.get(statedb.TableGuests, "id", env.GuestId)
	if raw == nil {
		return false
	}
	g := raw.(*corpusv1.Guest)
	return g.GetSpec().GetVolume() != nil || a.view().VolumeOfGuest(g.Id) != nil
}

func (a *applier) setInstanceRelease(c *corpusv1.SetInstanceRelease) error {
	p, env, in, err := a.instance(c.Project, c.Env, c.Instance)
	if err != nil {
		return err
	}
	if c.Release != 0 && a.view().ReleaseByNumber(c.Project, c.Env, c.Release) == nil {
		return fmt.Errorf("release %s of %s/%s: %w", corpusv1.ReleaseName(c.Release), c.Project, c.Env, ErrNotFound)
	}
	if c.Stage {
		if in.StagedRelease == c.Release {
			return nil
		}
		in.StagedRelease = c.Release
	} else {
		if in.Release == c.Release {
			return nil
		}
		in.Release = c.Release
	}
	a.putEnv(p, env)
	return nil
}

// setInstanceWebPort records where an instance's web listens now; the
// routes' targets follow.
func (a *applier) setInstanceWebPort(c *corpusv1.SetWebPort) error {
	p, env, in, err := a.instance(c.Project, c.Env, c.Instance)
	if err != nil {
		return err
	}
	if raw := a.get(statedb.TableGuests, "id", in.GuestId); raw == nil || raw.(*corpusv1.Guest).NodeId != c.NodeId {
		return fmt.Errorf("instance %d of %s/%s is not on this node: %w", c.Instance, c.Project, c.Env, ErrBadTransition)
	}
	if in.WebPort == c.Port {
		return nil
	}
	in.WebPort = c.Port
	a.putEnv(p, env)
	return nil
}

// instance returns a project (a copy to change), its environment and
// the environment's instance index (2…).
func (a *applier) instance(project, env string, index uint32) (*corpusv1.Project, *corpusv1.ProjectEnv, *corpusv1.ProjectInstance, error) {
	p, e, err := a.projectEnv(project, env)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, in := range e.Instances {
		if in.Index == index {
			return p, e, in, nil
		}
	}
	return nil, nil, nil, fmt.Errorf("instance %d of %s/%s: %w", index, project, env, ErrNotFound)
}
