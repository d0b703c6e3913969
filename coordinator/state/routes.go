package state

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"corpus/coordinator/fit"
	"corpus/coordinator/state/statedb"
	corpusv1 "corpus/proto/corpus/v1"
)

// createRoute adds a route. An http route's domain is unique in the
// cluster; a tcp route's port is unique on the node of its guest, which
// must be placed so the port can be checked.
func (a *applier) createRoute(c *corpusv1.CreateRoute) error {
	r := c.Route
	if r == nil || r.Id == "" || r.GuestId == "" || r.GuestPort <= 0 {
		return fmt.Errorf("route without id, guest or guest port: %w", ErrInvalid)
	}
	if a.get(statedb.TableRoutes, "id", r.Id) != nil {
		return fmt.Errorf("route id %s: %w", r.Id, ErrExists)
	}
	g, err := a.guest(func() any { return a.get(statedb.TableGuests, "id", r.GuestId) }, r.GuestId)
	if err != nil {
		return err
	}
	if err := a.checkRouteTarget(corpusv1.RouteKind(r.Kind), r.Domain, r.ListenPort, r.Id, g); err != nil {
		return err
	}
	r = proto.Clone(r).(*corpusv1.Route)
	r.GuestName = g.Name
	r.CreatedAt = a.now
	r.CreateIndex, r.ModifyIndex = a.index, a.index
	a.put(statedb.TableRoutes, r)
	return nil
}

// checkRouteTarget checks that a route of this kind may point at g.
func (a *applier) checkRouteTarget(kind corpusv1.RouteKind, domain string, port int32, routeID string, g *corpusv1.Guest) error {
	if g.DesiredState == DesiredDeleted {
		return fmt.Errorf("guest %s is being deleted: %w", g.Name, ErrBadTransition)
	}
	switch kind {
	case corpusv1.RouteHTTP:
		if domain == "" {
			return fmt.Errorf("http route without a domain: %w", ErrInvalid)
		}
		if raw := a.get(statedb.TableRoutes, "domain", domain); raw != nil && raw.(*corpusv1.Route).Id != routeID {
			return fmt.Errorf("domain %s is already routed to guest %s: %w", domain, raw.(*corpusv1.Route).GuestName, ErrExists)
		}
	case corpusv1.RouteTCP:
		if port <= 0 || port > 65535 {
			return fmt.Errorf("tcp route port %d: %w", port, ErrInvalid)
		}
		if g.NodeId == "" {
			return fmt.Errorf("guest %s is not placed on a node yet; expose it once it is: %w", g.Name, ErrBadTransition)
		}
		n, err := a.node(g.NodeId)
		if err != nil {
			return err
		}
		used := a.view().UsedPorts(n)
		for _, r := range a.view().RoutesOfGuest(g.Id) {
			if r.Id == routeID {
				delete(used, r.ListenPort)
			}
		}
		if why := fit.PortConflict(n, used, []*corpusv1.Port{{HostPort: port}}); why != "" {
			return fmt.Errorf("node %s: %s: %w", n.Name, why, ErrPortTaken)
		}
	default:
		return fmt.Errorf("route kind %q (want http or tcp): %w", kind, ErrInvalid)
	}
	return nil
}

func (a *applier) deleteRoute(c *corpusv1.DeleteRoute) error {
	raw := a.get(statedb.TableRoutes, "id", c.Id)
	if raw == nil {
		return fmt.Errorf("route %s: %w", c.Id, ErrNotFound)
	}
	if err := a.txn.Delete(statedb.TableRoutes, raw); err != nil {
		panic(fmt.Sprintf("state: deleting route: %v", err))
	}
	return nil
}

// moveRoute points a route at another guest in one step: the next watch
// message of both nodes carries the change.
func (a *applier) moveRoute(c *corpusv1.MoveRoute) error {
	raw := a.get(statedb.TableRoutes, "id", c.Id)
	if raw == nil {
		return fmt.Errorf("route %s: %w", c.Id, ErrNotFound)
	}
	r := proto.Clone(raw.(*corpusv1.Route)).(*corpusv1.Route)
	g, err := a.guest(func() any { return a.get(statedb.TableGuests, "name", c.GuestName) }, c.GuestName)
	if err != nil {
		return err
	}
	if err := a.checkRouteTarget(corpusv1.RouteKind(r.Kind), r.Domain, r.ListenPort, r.Id, g); err != nil {
		return err
	}
	r.GuestId, r.GuestName = g.Id, g.Name
	if c.GuestPort > 0 {
		r.GuestPort = c.GuestPort
	}
	r.ModifyIndex = a.index
	a.put(statedb.TableRoutes, r)
	return nil
}
