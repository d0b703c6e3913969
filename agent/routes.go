package agent

import (
	"context"
	"net"
	"strconv"

	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
)

// publishRoutes hands every driver that publishes routes itself
// (drivers.RoutePublisher) the routes to its guests, and returns the ids
// of the routes they serve; the proxy serves the rest. A driver's error
// is logged when it changes; what it serves still counts.
func (a *Agent) publishRoutes(ctx context.Context, routes []*corpusv1.Route, guests map[string]*corpusv1.Guest) map[string]bool {
	served := map[string]bool{}
	for name, d := range a.drivers {
		p, ok := d.(drivers.RoutePublisher)
		if !ok {
			continue
		}
		var mine []drivers.Route
		for _, r := range routes {
			g := guests[r.GuestId]
			if g == nil || g.Spec.GetDriver() != name || g.DesiredState == corpusv1.DesiredDeleted {
				continue
			}
			mine = append(mine, drivers.Route{
				ID: r.Id, Kind: corpusv1.RouteKind(r.Kind), Domain: r.Domain, ListenPort: int(r.ListenPort),
				GuestID: g.Id, Guest: g.Name, GuestPort: int(r.GuestPort),
			})
		}
		got, err := p.PublishRoutes(ctx, mine)
		for id := range got {
			served[id] = true
		}
		a.noteRouteErr(name, err)
		if a.net == nil {
			for _, r := range mine {
				if !got[r.ID] {
					a.noteRouteErr(name+" "+r.ID, errUnserved(r))
				}
			}
		}
	}
	return served
}

// routeTarget is where the proxy sends route r's traffic: the address
// the guest's driver gives (drivers.RouteTargeter), else the guest's
// address on the node's network; "" when there is none yet.
func (a *Agent) routeTarget(ctx context.Context, r *corpusv1.Route, g *corpusv1.Guest) string {
	if t, ok := a.drivers[g.Spec.GetDriver()].(drivers.RouteTargeter); ok {
		addr, err := t.RouteTarget(ctx, g.Name, int(r.GuestPort))
		a.noteRouteErr("target "+r.Id, err)
		return addr
	}
	if g.Address == "" {
		return ""
	}
	return net.JoinHostPort(g.Address, strconv.Itoa(int(r.GuestPort)))
}

// noteRouteErr logs a route error of key once, and its end.
func (a *Agent) noteRouteErr(key string, err error) {
	a.mu.Lock()
	if a.routeErrs == nil {
		a.routeErrs = map[string]string{}
	}
	prev, had := a.routeErrs[key]
	if err == nil {
		delete(a.routeErrs, key)
	} else {
		a.routeErrs[key] = err.Error()
	}
	a.mu.Unlock()
	switch {
	case err != nil && prev != err.Error():
		a.logger.Warn("route not served", "what", key, "error", err)
	case err == nil && had:
		a.logger.Info("route served again", "what", key)
	}
}

type unservedError struct{ r drivers.Route }

func (e unservedError) Error() string {
	if e.r.Kind == corpusv1.RouteTCP {
		return "tcp route " + strconv.Itoa(e.r.ListenPort) + " to guest " + e.r.Guest + " cannot be served: the driver publishes http routes only and this agent runs no proxy"
	}
	return "http route " + e.r.Domain + " to guest " + e.r.Guest + " is not published by the driver and this agent runs no proxy"
}

func errUnserved(r drivers.Route) error { return unservedError{r} }
