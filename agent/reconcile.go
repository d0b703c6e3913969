package agent

import (
	"context"
	"maps"
	"net/netip"
	"time"

	"corpus/agent/network"
	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
)

// reconcileLoop runs a pass whenever the desired state changes and every
// ResyncInterval, so drift made behind the agent's back is repaired even
// when no event announces it.
func (a *Agent) reconcileLoop(ctx context.Context) {
	tick := time.NewTicker(a.cfg.ResyncInterval)
	defer tick.Stop()
	// The loop proves the agent alive: it beats after every pass, and
	// between passes as often as the watchdog wants. A pass that hangs
	// starves the watchdog.
	alive, stopAlive := a.cfg.Heart.Ticker()
	defer stopAlive()
	for {
		a.pass(ctx)
		a.cfg.Heart.Beat()
	idle:
		for {
			select {
			case <-ctx.Done():
				return
			case <-a.kick:
				break idle
			case <-tick.C:
				break idle
			case <-alive:
				a.cfg.Heart.Beat()
			}
		}
	}
}

// pass starts or wakes a worker per desired guest and removes guests that
// exist on the host but are no longer desired here.
func (a *Agent) pass(ctx context.Context) {
	// Workers first: a guest's start does not wait for the NAT and proxy
	// programming of this pass (its worker makes sure the bridge exists).
	defer a.reconcileNetwork(ctx)
	defer a.vols.Reconcile(ctx)
	defer a.reconcileServices(ctx)
	defer a.reconcileInstances(ctx)
	a.mu.Lock()
	known := a.known
	for id := range a.desired {
		w, ok := a.workers[id]
		if !ok {
			w = a.guests.NewWorker(id)
			a.workers[id] = w
			a.workerWG.Add(1)
			go func() { defer a.workerWG.Done(); w.Run(ctx) }()
		}
		w.Kick()
	}
	for id, w := range a.workers {
		if _, ok := a.desired[id]; !ok {
			w.Kick() // it exits, waking a pass that removes what is left of its guest
		}
	}
	a.mu.Unlock()
	if !known {
		return // never told anything: touch nothing
	}
	present, complete := map[string]bool{}, true
	for name, d := range a.drivers {
		list, err := d.List(ctx)
		if err != nil {
			a.logger.Warn("listing guests", "driver", name, "error", err)
			complete = false
			continue
		}
		for _, st := range list {
			present[st.ID] = true
			a.mu.Lock()
			_, wanted := a.desired[st.ID]
			_, busy := a.workers[st.ID]
			_, orphan := a.orphans[st.ID]
			a.mu.Unlock()
			if wanted || busy || orphan {
				continue
			}
			// The name may have been taken by a new guest since List.
			if now, err := d.Inspect(ctx, st.Name); err != nil || now.ID != st.ID {
				continue
			}
			a.logger.Info("removing guest that is no longer desired on this node", "guest", st.Name, "guest_id", st.ID)
			if err := d.Destroy(ctx, st.Name); err != nil {
				a.logger.Warn("removing undesired guest", "guest", st.Name, "error", err)
			}
		}
	}
	if complete {
		a.pruneOrphans(present)
	}
}

// reconcileServices runs the services of this node's guests and removes
// the backups the state no longer names (agent/services).
func (a *Agent) reconcileServices(ctx context.Context) {
	a.mu.Lock()
	known, svcs, guests, held := a.known, maps.Clone(a.guestServices), maps.Clone(a.desired), a.heldBackups
	a.mu.Unlock()
	if known {
		a.services.Reconcile(ctx, svcs, guests, held)
	}
}

// reconcileNetwork makes the node's bridge, NAT rules and proxy routes
// match the desired state, after drivers that publish routes themselves
// have done so (agent/network).
func (a *Agent) reconcileNetwork(ctx context.Context) {
	a.mu.Lock()
	node, routes, known, cdns, httpsCerts := a.node, a.routes, a.known, a.cdns, a.httpsCerts
	policy := network.Policy{Projects: a.guestProjects, Control: a.controlEndpoints(), Reach: a.serviceReach, Peers: a.peers}
	guests := make([]*corpusv1.Guest, 0, len(a.desired))
	byID := make(map[string]*corpusv1.Guest, len(a.desired))
	for _, g := range a.desired {
		guests = append(guests, g)
		byID[g.Id] = g
		if a.observed[g.Id].GetState() == corpusv1.ObservedStarting {
			if policy.Starting == nil {
				policy.Starting = map[string]bool{}
			}
			policy.Starting[g.Id] = true
		}
	}
	a.mu.Unlock()
	if !known || node == nil {
		return
	}
	served := a.routeSet.Publish(ctx, routes, byID, a.net != nil)
	if a.net == nil {
		return
	}
	table := network.ProxyRoutes(routes, byID, served, func(r *corpusv1.Route, g *corpusv1.Guest) string {
		return a.routeSet.Target(ctx, r, g)
	})
	var tlsErr error
	table.TLS, table.Challenges, tlsErr = a.tls.Material(ctx, httpsCerts)
	a.routeSet.Note("certificates", tlsErr)
	a.net.Reconcile(ctx, node, guests, table, cdns, policy)
}

// guestNetwork returns where guest g sits on the node's network, making
// sure the bridge it joins exists first.
func (a *Agent) guestNetwork(ctx context.Context, g *corpusv1.Guest) (*drivers.Network, error) {
	a.mu.Lock()
	node, cdns := a.node, a.cdns
	a.mu.Unlock()
	return a.net.GuestNetwork(ctx, node, cdns, g)
}

// controlEndpoints are the control plane's endpoints this agent knows
// (coordinator API and gossip addresses given as IP:port; names are left
// out, their addresses unknown to the rules).
func (a *Agent) controlEndpoints() []netip.AddrPort {
	var out []netip.AddrPort
	addrs := a.coords.all()
	if a.gossipPeer != "" {
		addrs = append(addrs, a.gossipPeer)
	}
	for _, s := range addrs {
		if ap, err := netip.ParseAddrPort(s); err == nil && ap.Addr().Is4() && !ap.Addr().IsLoopback() {
			out = append(out, ap)
		}
	}
	return out
}

// setObserved records a guest's observed state and asks for a report when
// it changed.
func (a *Agent) setObserved(id string, o *corpusv1.GuestObserved) {
	a.mu.Lock()
	prev := a.observed[id]
	a.observed[id] = o
	a.mu.Unlock()
	if !corpusv1.SameObserved(prev, o) {
		a.poke(a.report)
	}
}
