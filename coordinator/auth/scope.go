package auth

import (
	"slices"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// What a caller may see and act on: one read model for every surface
// (the API's lists and gets, and so the CLI and the dashboard).
//
// Operators, node agents and coordinators see and act on everything.
// A user of role dev or viewer sees the projects granted to them and
// what belongs to those projects:
//
//	project            granted to the user
//	guest              an environment's guest or instance of such a project,
//	                   or the guest of a service it sees
//	service            its project is such a project; read only when it is
//	                   only linked to one
//	volume, route      bound to (routed to) a guest it sees
//	domain (traffic)   routed to a guest it sees
//
// Devs act on what they see, but for services only linked to their
// projects (another project's database is read only); viewers only
// read. Everything else (another team's project, an operator's guest of
// no project, a service of no project, an unbound volume) is the
// operators' alone. What a procedure lets a role do at all is its
// policy; this decides which objects.

// Access is what a caller may do with one object.
type Access uint8

// Access levels, each including the one before.
const (
	NoAccess Access = iota
	ReadOnly
	ReadWrite
)

// all reports whether p sees everything.
func (p Principal) all() bool {
	switch p.Kind {
	case Operator, Agent, Coordinator:
		return true
	}
	return false
}

// granted is the access p's role gives to a project granted to it.
func (p Principal) granted() Access {
	switch p.Kind {
	case Dev:
		return ReadWrite
	case Viewer:
		return ReadOnly
	}
	return NoAccess
}

// ProjectAccess is p's access to project proj (nil: none).
func ProjectAccess(p Principal, proj *corpusv1.Project) Access {
	switch {
	case p.all():
		return ReadWrite
	case proj == nil || p.User == "" || !slices.Contains(proj.Members, p.User):
		return NoAccess
	}
	return p.granted()
}

// Scope is what one principal may see and act on in one view of the
// state. Its methods take objects of that view.
type Scope struct {
	p   Principal
	all bool
	// projects, guests and services by name or id, with the access p
	// has; what is not there it may not see.
	projects map[string]Access
	guests   map[string]Access
	services map[string]Access
}

// ScopeOf works out what p may see in view: at once for the projects
// and services granted to it (a user's are few), nothing for those who
// see everything.
func ScopeOf(view *state.Snap, p Principal) *Scope {
	s := &Scope{p: p, all: p.all()}
	if s.all {
		return s
	}
	s.projects, s.guests, s.services = map[string]Access{}, map[string]Access{}, map[string]Access{}
	if p.granted() == NoAccess {
		return s
	}
	for _, proj := range view.Projects() {
		a := ProjectAccess(p, proj)
		if a == NoAccess {
			continue
		}
		s.projects[proj.Name] = a
		for _, e := range proj.Envs {
			for _, in := range state.Instances(e) {
				s.guests[in.GuestID] = a
			}
		}
	}
	for _, svc := range view.Services() {
		a := s.projects[svc.Project]
		if a == NoAccess && slices.ContainsFunc(svc.Links, func(l *corpusv1.ServiceLink) bool { return s.projects[l.Project] != NoAccess }) {
			a = ReadOnly
		}
		if a == NoAccess {
			continue
		}
		s.services[svc.Name] = a
		if svc.GuestId != "" {
			s.guests[svc.GuestId] = max(s.guests[svc.GuestId], a)
		}
	}
	return s
}

// Principal is whose scope it is.
func (s *Scope) Principal() Principal { return s.p }

// All reports whether the scope is everything (an operator's).
func (s *Scope) All() bool { return s.all }

// Project is the access to a project.
func (s *Scope) Project(proj *corpusv1.Project) Access {
	if s.all {
		return ReadWrite
	}
	return s.projects[proj.GetName()]
}

// Guest is the access to a guest.
func (s *Scope) Guest(g *corpusv1.Guest) Access {
	if s.all {
		return ReadWrite
	}
	return s.guests[g.GetId()]
}

// Service is the access to a service.
func (s *Scope) Service(svc *corpusv1.Service) Access {
	if s.all {
		return ReadWrite
	}
	return s.services[svc.GetName()]
}

// Volume is the access to a volume: its guest's; an unbound volume is
// the operators'.
func (s *Scope) Volume(v *corpusv1.Volume) Access {
	if s.all {
		return ReadWrite
	}
	if v.GetGuestId() == "" {
		return NoAccess
	}
	return s.guests[v.GuestId]
}

// Route is the access to a route (and to the traffic of its domain):
// its guest's.
func (s *Scope) Route(r *corpusv1.Route) Access {
	if s.all {
		return ReadWrite
	}
	return s.guests[r.GetGuestId()]
}
