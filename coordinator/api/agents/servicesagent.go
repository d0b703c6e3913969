package agents

import (
	"context"
	"strings"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

// The agents' side of services: what a service's guest runs, who may
// reach it, and how it is.

// guestServices maps those of guests that run a service to its name.
func guestServices(view *state.Snap, guests []*corpusv1.Guest) map[string]string {
	out := map[string]string{}
	for _, g := range guests {
		if svc := view.ServiceOfGuest(g.Id); svc != nil {
			out[g.Id] = svc.Name
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// serviceReach says, for each service guest among guests, the addresses
// of the guests linked to it (the guests of its linked project
// environments, wherever they run).
func serviceReach(view *state.Snap, guests []*corpusv1.Guest) []*corpusv1.ServiceReach {
	var out []*corpusv1.ServiceReach
	for _, g := range guests {
		svc := view.ServiceOfGuest(g.Id)
		if svc == nil {
			continue
		}
		r := &corpusv1.ServiceReach{GuestId: g.Id, Port: svc.TemplateSpec.GetPort()}
		for _, l := range svc.Links {
			e := corpusv1.EnvNamed(view.Project(l.Project), l.Env)
			if e == nil {
				continue
			}
			for _, in := range state.Instances(e) {
				if lg := view.Guest(in.GuestID); lg != nil && lg.Address != "" {
					r.From = append(r.From, lg.Address)
				}
			}
		}
		out = append(out, r)
	}
	return out
}

// reportServices records the changed observations of a node's services.
func (s *Service) reportServices(ctx context.Context, view *state.Snap, nodeID string, reported []*corpusv1.ReportedService) (uint64, error) {
	var changed []*corpusv1.ReportedService
	for _, r := range reported {
		svc := view.ServiceByID(r.ServiceId)
		if svc == nil || r.Observed == nil {
			continue
		}
		if g := view.Guest(svc.GuestId); g == nil || g.NodeId != nodeID {
			continue
		}
		if svc.Observed.GetState() != r.Observed.State || svc.Observed.GetMessage() != r.Observed.Message {
			changed = append(changed, r)
		}
	}
	if len(changed) == 0 {
		return 0, nil
	}
	return s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_ReportServices{ReportServices: &corpusv1.ReportServices{
		NodeId: nodeID, Services: changed,
	}}})
}

// guestWaiting says which of guests wait for services: project guests
// whose environment links a service (with a guest of its own, desired
// running) that is not healthy.
func guestWaiting(view *state.Snap, guests []*corpusv1.Guest) map[string]string {
	out := map[string]string{}
	for _, g := range guests {
		p, e := view.ProjectOfGuest(g.Id)
		if p == nil {
			continue
		}
		var waits []string
		for _, svc := range view.LinksOf(p.Name, e.Name) {
			if svc.GuestId == "" || svc.DesiredState != state.DesiredRunning {
				continue
			}
			if st := svc.Observed.GetState(); st != corpusv1.ServiceHealthy {
				if st == "" {
					st = "not started"
				}
				waits = append(waits, "service "+svc.Name+" ("+st+")")
			}
		}
		if len(waits) > 0 {
			out[g.Id] = strings.Join(waits, ", ")
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
