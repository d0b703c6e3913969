package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"corpus/agent/cache"
	"corpus/agent/deploy"
	"corpus/agent/network"
	"corpus/agent/runtime"
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
	for id, g := range a.desired {
		w, ok := a.workers[id]
		if !ok {
			w = &worker{a: a, id: id, name: g.Name, kick: make(chan struct{}, 1)}
			a.workers[id] = w
			a.workerWG.Add(1)
			go func() { defer a.workerWG.Done(); w.run(ctx) }()
		}
		a.poke(w.kick)
	}
	for id, w := range a.workers {
		if _, ok := a.desired[id]; !ok {
			a.poke(w.kick) // it exits, waking a pass that removes what is left of its guest
		}
	}
	a.mu.Unlock()
	if !known {
		return // never told anything: touch nothing
	}
	for name, d := range a.drivers {
		list, err := d.List(ctx)
		if err != nil {
			a.logger.Warn("listing guests", "driver", name, "error", err)
			continue
		}
		for _, st := range list {
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

// worker reconciles one guest; it exits when the guest is no longer desired.
type worker struct {
	a    *Agent
	id   string
	name string
	kick chan struct{}

	failures int
	// terminal is the desired version a permanent failure was seen at;
	// it is not retried until what is desired changes.
	terminal string
}

func (w *worker) run(ctx context.Context) {
	var (
		retry    <-chan time.Time
		failedAt string // desired version of the failure retry waits out
	)
	for {
		kicked := false
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
			kicked = true
		case <-retry:
		}
		g := w.current()
		if g == nil {
			return
		}
		// While backing off, only a change to the guest cuts the wait
		// short; periodic kicks do not.
		want := desiredVersion(g)
		if v := w.a.vols.GuestVolume(g.Id); v != nil {
			want += "|volume " + strconv.FormatInt(v.SizeBytes, 10)
		}
		if kicked && retry != nil && want == failedAt {
			continue
		}
		retry = nil
		if w.terminal != "" && w.terminal == want {
			continue
		}
		err := w.reconcile(ctx, g)
		switch {
		case err == nil:
			w.failures, w.terminal = 0, ""
		case ctx.Err() != nil:
			return
		case errors.Is(err, drivers.ErrUnknownImage), errors.Is(err, drivers.ErrNotSupported), errors.Is(err, drivers.ErrInvalidSpec), errors.Is(err, errNoDriver):
			w.terminal = want
			w.a.setObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedFailed, Message: err.Error()})
			w.a.logger.Error("guest failed permanently", "guest", g.Name, "error", err)
		default:
			w.failures++
			delay := min(time.Duration(1<<min(w.failures, 6))*time.Second/2, 30*time.Second)
			w.a.setObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedFailed, Message: err.Error()})
			w.a.logger.Warn("reconciling guest failed", "guest", g.Name, "error", err, "retry_in", delay)
			retry, failedAt = time.After(delay), want
		}
	}
}

// desiredVersion identifies what is desired of a guest, leaving out what
// changes with every report (observed state, events, indexes).
func desiredVersion(g *corpusv1.Guest) string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&corpusv1.Guest{
		Id: g.Id, Spec: g.Spec, DesiredState: g.DesiredState, NodeId: g.NodeId, Address: g.Address, IdRange: g.IdRange,
	})
	return string(b)
}

// current returns the guest's desired state, or nil after removing the
// worker when the guest is no longer desired. Then the reconcile loop is
// woken: while the worker was there, the guest was not taken for an
// orphan; now it is, and a copy left on the host (the guest was deleted
// elsewhere, or moved to another node) is removed.
func (w *worker) current() *corpusv1.Guest {
	a := w.a
	a.mu.Lock()
	defer a.mu.Unlock()
	g := a.desired[w.id]
	if g == nil {
		delete(a.workers, w.id)
		delete(a.observed, w.id)
		a.poke(a.kick)
	}
	return g
}

var errNoDriver = errors.New("driver is not available on this node")

// reconcile makes the guest what g says, timing the pass; an error
// carries the step that failed (see failedStep).
func (w *worker) reconcile(ctx context.Context, g *corpusv1.Guest) error {
	start := time.Now()
	err := w.converge(ctx, g)
	w.a.metrics.reconciled(w.a.driverLabel(g), time.Since(start), err)
	return err
}

func (w *worker) converge(ctx context.Context, g *corpusv1.Guest) error {
	a := w.a
	d, ok := a.drivers[g.Spec.GetDriver()]
	if !ok {
		return atStep("driver", fmt.Errorf("%s: %w", g.Spec.GetDriver(), errNoDriver))
	}
	st, err := d.Inspect(ctx, g.Name)
	exists := err == nil
	if err != nil && !errors.Is(err, drivers.ErrNotFound) {
		return atStep("inspect", fmt.Errorf("inspecting: %w", err))
	}
	if exists && st.ID != g.Id {
		a.logger.Info("replacing a stale guest of the same name", "guest", g.Name, "stale_id", st.ID)
		if err := d.Destroy(ctx, g.Name); err != nil {
			return atStep("destroy", fmt.Errorf("removing stale guest: %w", err))
		}
		exists = false
	}
	if g.DesiredState == corpusv1.DesiredDeleted {
		if exists {
			if err := d.Destroy(ctx, g.Name); err != nil {
				return atStep("destroy", fmt.Errorf("destroying: %w", err))
			}
			a.logger.Info("guest destroyed", "guest", g.Name)
		}
		a.setObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedDeleted})
		return nil
	}
	if v := a.vols.GuestVolume(g.Id); v != nil && a.vols.Available() && exists {
		if err := a.vols.ResizeGuest(ctx, d, g, a.cfg.StopTimeout); err != nil {
			return atStep("volume", err)
		}
		if st, err = d.Inspect(ctx, g.Name); err != nil {
			return atStep("inspect", fmt.Errorf("inspecting: %w", err))
		}
	}
	if exists && d.Capabilities().Converge {
		// The driver compares the guest with its spec itself: spec
		// changes and hand edits in the engine are written back.
		spec, err := a.driverSpec(ctx, d, g)
		if err != nil {
			return atStep("converge", err)
		}
		if err := d.Create(ctx, spec, nil); err != nil {
			return atStep("converge", fmt.Errorf("converging: %w", err))
		}
		if st, err = d.Inspect(ctx, g.Name); err != nil {
			return atStep("inspect", fmt.Errorf("inspecting: %w", err))
		}
	}
	if !exists {
		if err := w.create(ctx, d, g); err != nil {
			return atStep("create", err)
		}
		if st, err = d.Inspect(ctx, g.Name); err != nil {
			return atStep("inspect", fmt.Errorf("inspecting new guest: %w", err))
		}
	}
	a.mu.Lock()
	waiting := a.guestWaiting[g.Id]
	a.mu.Unlock()
	switch {
	case g.DesiredState == corpusv1.DesiredRunning && st.State != drivers.StateRunning && waiting != "":
		// Started once the services it depends on are healthy (the
		// watch says so, and wakes this worker).
		a.setObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedStarting, Message: "waiting for " + waiting})
		return nil
	case g.DesiredState == corpusv1.DesiredRunning && st.State != drivers.StateRunning:
		// The driver's message is kept: a guest that stays starting (a
		// cluster pulling an image) does not flap between two reports.
		a.setObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedStarting, Message: st.Message})
		if a.net != nil && d.Capabilities().HostNetwork {
			if _, err := a.guestNetwork(ctx, g); err != nil {
				return atStep("network", err)
			}
		}
		if err := a.vols.AttachBlockVolume(ctx, d, g); err != nil {
			return atStep("volume", err)
		}
		if rm, ok := d.(drivers.IDRemapper); ok {
			// A guest given another range (one of its own, where it
			// shared one) moves to it now.
			if err := rm.RemapIDs(ctx, g.Name, g.IdRange); err != nil {
				return atStep("ids", err)
			}
		}
		if err := d.Start(ctx, g.Name); err != nil {
			return atStep("start", fmt.Errorf("starting: %w", err))
		}
		a.logger.Info("guest started", "guest", g.Name)
	case g.DesiredState == corpusv1.DesiredStopped && st.State == drivers.StateRunning:
		a.setObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedStopping})
		if err := d.Stop(ctx, g.Name, a.cfg.StopTimeout); err != nil {
			return atStep("stop", fmt.Errorf("stopping: %w", err))
		}
		a.logger.Info("guest stopped", "guest", g.Name)
	default:
		a.setObserved(g.Id, observedFrom(st))
		return nil
	}
	st, err = d.Inspect(ctx, g.Name)
	if err != nil {
		return atStep("inspect", fmt.Errorf("inspecting: %w", err))
	}
	a.setObserved(g.Id, observedFrom(st))
	return nil
}

func (w *worker) create(ctx context.Context, d drivers.Driver, g *corpusv1.Guest) error {
	a := w.a
	a.setObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedCreating})
	e := cache.Entry{GuestID: g.Id, GuestName: g.Name, Driver: g.Spec.GetDriver(), Op: "create", Started: time.Now()}
	if err := a.cache.Begin(e); err != nil {
		return fmt.Errorf("journaling create: %w", err)
	}
	spec, err := a.driverSpec(ctx, d, g)
	if err != nil {
		return err
	}
	progress := func(msg string) {
		a.setObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedCreating, Message: msg})
	}
	start := time.Now()
	if err := d.Create(ctx, spec, progress); err != nil {
		// Leave the journal entry: the next start cleans up the remains.
		return fmt.Errorf("creating: %w", err)
	}
	a.logger.Info("guest created", "guest", g.Name, "image", spec.Image, "took", time.Since(start).Round(time.Millisecond))
	return a.cache.End(e)
}

// driverSpec is what the guest's driver needs to make g: with the node's
// network and host volume when the agent runs them, else with the
// volume for the driver to keep itself.
func (a *Agent) driverSpec(ctx context.Context, d drivers.Driver, g *corpusv1.Guest) (drivers.GuestSpec, error) {
	spec := drivers.GuestSpec{
		ID: g.Id, Name: g.Name, Image: g.Spec.GetImage(), Packages: g.Spec.GetPackages(),
		MemoryBytes: g.Spec.GetResources().GetMemoryBytes(),
		CPUMillis:   g.Spec.GetResources().GetCpuMillis(),
		DiskBytes:   g.Spec.GetResources().GetDiskBytes(),
		Env:         g.Spec.GetEnv(),
		Privileged:  g.Spec.GetPrivileged(),
		IDRange:     g.IdRange,
	}
	for _, p := range g.Spec.GetPorts() {
		spec.Ports = append(spec.Ports, drivers.Port{GuestPort: int(p.GuestPort), HostPort: int(p.HostPort), Protocol: p.Protocol})
	}
	a.mu.Lock()
	project := a.guestProjects[g.Id]
	a.mu.Unlock()
	if project != "" {
		// A project's guest runs its processes under the supervisor; a
		// driver whose guests run an image's command runs it as that.
		spec.Boot = runtime.Boot(deploy.ProjectsRoot)
	}
	caps := d.Capabilities()
	if a.net != nil && caps.HostNetwork {
		n, err := a.guestNetwork(ctx, g)
		if err != nil {
			return spec, err
		}
		spec.Network = n
	}
	vs := g.Spec.GetVolume()
	if vs == nil {
		return spec, nil
	}
	switch caps.Volumes {
	case drivers.HostVolumes:
		mounts, err := a.vols.Mounts(ctx, g)
		if err != nil {
			return spec, err
		}
		spec.Mounts = mounts
	case drivers.BlockVolumes:
		bv, err := a.vols.BlockVolume(ctx, g)
		if err != nil {
			return spec, err
		}
		spec.BlockVolumes = []drivers.BlockVolume{bv}
	case drivers.KeptVolumes:
		// A new volume is named after its guest; a bound one keeps its name.
		spec.Volume = &drivers.Volume{Name: g.Name, SizeBytes: vs.SizeBytes, Path: vs.Path}
		if vs.UseVolume != "" {
			spec.Volume.Name = vs.UseVolume
		}
		if v := a.vols.GuestVolume(g.Id); v != nil {
			spec.Volume.Name, spec.Volume.SizeBytes = v.Name, v.SizeBytes // resized since
		}
	default:
		// Permanent until the guest's spec changes.
		return spec, fmt.Errorf("driver %s cannot give a guest a volume: %w", d.Name(), drivers.ErrNotSupported)
	}
	return spec, nil
}

// recoverJournal removes what interrupted creates left behind; the
// reconcile loop then creates those guests again from scratch.
func (a *Agent) recoverJournal(ctx context.Context) error {
	entries, err := a.cache.Journal()
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if d, ok := a.drivers[e.Driver]; ok && e.Op == "create" {
			a.logger.Info("cleaning up an interrupted create", "guest", e.GuestName, "started", e.Started)
			if err := d.Destroy(ctx, e.GuestName); err != nil {
				errs = append(errs, fmt.Errorf("cleaning up %s: %w", e.GuestName, err))
				continue
			}
		}
		if err := a.cache.End(e); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func observedFrom(st drivers.GuestStatus) *corpusv1.GuestObserved {
	return &corpusv1.GuestObserved{State: string(st.State), Pid: int64(st.PID), Message: st.Message}
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
