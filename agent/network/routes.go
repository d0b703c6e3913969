package network

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
)

// Routes publishes the node's routes through the drivers that publish
// them themselves and finds the proxy's targets; it logs each route
// problem once, and its end.
type Routes struct {
	drivers map[string]drivers.Driver
	logger  *slog.Logger

	mu   sync.Mutex
	errs map[string]string // the route problems last logged, by what they concern
}

// NewRoutes returns the route publisher of a node with those drivers.
func NewRoutes(ds map[string]drivers.Driver, logger *slog.Logger) *Routes {
	return &Routes{drivers: ds, logger: logger, errs: map[string]string{}}
}

// Publish hands every driver that publishes routes itself
// (drivers.RoutePublisher) the routes to its guests, and returns the ids
// of the routes they serve; the proxy (when proxied) serves the rest. A
// driver's error is logged when it changes; what it serves still counts.
func (rs *Routes) Publish(ctx context.Context, routes []*corpusv1.Route, guests map[string]*corpusv1.Guest, proxied bool) map[string]bool {
	served := map[string]bool{}
	for name, d := range rs.drivers {
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
		rs.Note(name, err)
		if !proxied {
			for _, r := range mine {
				if !got[r.ID] {
					rs.Note(name+" "+r.ID, errUnserved(r))
				}
			}
		}
	}
	return served
}

// Target is where the proxy sends route r's traffic: the address the
// guest's driver gives (drivers.RouteTargeter), else the guest's
// address on the node's network; "" when there is none yet.
func (rs *Routes) Target(ctx context.Context, r *corpusv1.Route, g *corpusv1.Guest) string {
	if t, ok := rs.drivers[g.Spec.GetDriver()].(drivers.RouteTargeter); ok {
		addr, err := t.RouteTarget(ctx, g.Name, int(r.GuestPort))
		rs.Note("target "+r.Id, err)
		return addr
	}
	if g.Address == "" {
		return ""
	}
	return net.JoinHostPort(g.Address, strconv.Itoa(int(r.GuestPort)))
}

// Note logs a route error of key once, and its end.
func (rs *Routes) Note(key string, err error) {
	rs.mu.Lock()
	prev, had := rs.errs[key]
	if err == nil {
		delete(rs.errs, key)
	} else {
		rs.errs[key] = err.Error()
	}
	rs.mu.Unlock()
	switch {
	case err != nil && prev != err.Error():
		rs.logger.Warn("route not served", "what", key, "error", err)
	case err == nil && had:
		rs.logger.Info("route served again", "what", key)
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
