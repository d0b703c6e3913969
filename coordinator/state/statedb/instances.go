package statedb

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	corpusv1 "corpus/proto/corpus/v1"
)

// EnvOfGuest returns the project environment a guest is an instance of
// and its index (1 for the environment's own guest).
func (v *Snap) EnvOfGuest(guestID string) (*corpusv1.Project, *corpusv1.ProjectEnv, uint32) {
	for _, p := range v.Projects() {
		for _, e := range p.GetEnvs() {
			for _, in := range Instances(e) {
				if in.GuestID == guestID {
					return p, e, in.Index
				}
			}
		}
	}
	return nil, nil, 0
}

// envTargets are where an environment's web traffic goes: each instance
// that runs web, placed, addressed and (past the first) serving a
// release, at its web port; nil for an environment of one instance (its
// routes name their guest).
func (v *Snap) envTargets(e *corpusv1.ProjectEnv) []string {
	if len(e.GetInstances()) == 0 {
		return nil
	}
	var out []string
	for _, in := range Instances(e) {
		if !corpusv1.RunsOn(e.Scale, in.Index, "web") {
			continue
		}
		g := v.Guest(in.GuestID)
		if g == nil || g.Address == "" || g.NodeId == "" || g.DesiredState == corpusv1.DesiredDeleted {
			continue
		}
		if in.Index > 1 && g.GetObserved().GetRelease() == 0 {
			continue // its agent has not deployed anything there yet
		}
		out = append(out, fmt.Sprintf("%s:%d", g.Address, in.WebPort))
	}
	if out == nil {
		out = []string{} // routed, but to nothing: the proxy answers 503
	}
	return out
}

// envRoutes returns, for each node with an instance of an environment of
// several, that environment's http routes carrying their targets.
func (v *Snap) envRoutes(nodeID string) []*corpusv1.Route {
	var out []*corpusv1.Route
	for _, p := range v.Projects() {
		for _, e := range p.Envs {
			if len(e.Instances) == 0 || !v.envOnNode(e, nodeID) {
				continue
			}
			targets := v.envTargets(e)
			for _, r := range v.RoutesOfGuest(e.GuestId) {
				if !r.Is(corpusv1.RouteHTTP) {
					continue
				}
				r = proto.Clone(r).(*corpusv1.Route)
				r.Targets = targets
				out = append(out, r)
			}
		}
	}
	return out
}

// envOnNode says whether any instance of e runs on the node.
func (v *Snap) envOnNode(e *corpusv1.ProjectEnv, nodeID string) bool {
	for _, in := range Instances(e) {
		if g := v.Guest(in.GuestID); g != nil && g.NodeId == nodeID && g.DesiredState != corpusv1.DesiredDeleted {
			return true
		}
	}
	return false
}

// EnvNodes are the nodes running an instance of e, by id.
func (v *Snap) EnvNodes(e *corpusv1.ProjectEnv) []string {
	var out []string
	for _, in := range Instances(e) {
		if g := v.Guest(in.GuestID); g != nil && g.NodeId != "" && g.DesiredState != corpusv1.DesiredDeleted && !slices.Contains(out, g.NodeId) {
			out = append(out, g.NodeId)
		}
	}
	return out
}

// Instance is one guest of an environment as the rest of corpus sees it.
type Instance struct {
	Index     uint32
	GuestID   string
	GuestName string
	// Release is the release it should serve (the environment's current
	// one for instance 1).
	Release uint32
	WebPort int32
}

// Instances lists every guest of an environment, instance 1 first.
func Instances(e *corpusv1.ProjectEnv) []Instance {
	out := []Instance{{Index: 1, GuestID: e.GetGuestId(), GuestName: e.GetGuestName(), Release: e.GetCurrentRelease(), WebPort: WebPort(e)}}
	for _, in := range e.GetInstances() {
		port := in.WebPort
		if port == 0 {
			port = e.GetHttpPort()
		}
		out = append(out, Instance{Index: in.Index, GuestID: in.GuestId, GuestName: in.GuestName, Release: in.Release, WebPort: port})
	}
	return out
}

// WebPort is the guest port an environment's domains route to.
func WebPort(env *corpusv1.ProjectEnv) int32 {
	if env.GetWebPort() != 0 {
		return env.WebPort
	}
	return env.GetHttpPort()
}
