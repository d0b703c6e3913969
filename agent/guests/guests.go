// Package guests converges each guest of the node on what the cluster
// wants of it. A Worker per guest compares the desired state with what
// the guest's driver observes and acts on the difference, journaling
// creates (RecoverJournal cleans up after a crash mid-create), backing
// off on failure, and marking permanent failures (unknown image, spec
// the driver cannot run, driver missing) terminal until what is desired
// changes. It reaches the rest of the agent through Node and Volumes.
//
// Guest worker, per reconcile:
//
//	desired  │ observed: absent      stopped        running
//	─────────┼──────────────────────────────────────────────────
//	running  │ create+start          start          —
//	stopped  │ create                —              stop
//	deleted  │ report deleted        destroy        destroy
package guests

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"corpus/agent/cache"
	"corpus/agent/deploy"
	"corpus/agent/runtime"
	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
)

// Node is the agent as the workers see it.
type Node interface {
	// Current returns the guest's desired state; nil when it is no
	// longer desired, and the node forgets the guest's worker then.
	Current(id string) *corpusv1.Guest
	// Waiting says what the guest waits for before it may start (the
	// services its project links), "" for nothing.
	Waiting(id string) string
	// Project names the project whose processes the guest runs, "" for
	// none.
	Project(id string) string
	// SetObserved records how the guest was last observed.
	SetObserved(id string, o *corpusv1.GuestObserved)
}

// Volumes keeps the guests' volumes on the node (agent/volumes).
type Volumes interface {
	Available() bool
	GuestVolume(guestID string) *corpusv1.Volume
	Mounts(ctx context.Context, g *corpusv1.Guest) ([]drivers.Mount, error)
	BlockVolume(ctx context.Context, g *corpusv1.Guest) (drivers.BlockVolume, error)
	AttachBlockVolume(ctx context.Context, d drivers.Driver, g *corpusv1.Guest) error
	ResizeGuest(ctx context.Context, d drivers.Driver, g *corpusv1.Guest, timeout time.Duration) error
}

// Config is what the workers of a node share.
type Config struct {
	Drivers map[string]drivers.Driver
	Volumes Volumes
	// Network gives where a guest sits on the node's network, making
	// sure the bridge it joins exists; nil when the node runs none.
	Network func(ctx context.Context, g *corpusv1.Guest) (*drivers.Network, error)
	// Journal records creates in flight.
	Journal     *cache.Cache
	StopTimeout time.Duration
	// Reconciled, when set, is told how long each pass took and how it
	// ended.
	Reconciled func(g *corpusv1.Guest, took time.Duration, err error)
	Node       Node
	Logger     *slog.Logger
}

// Worker reconciles one guest; it exits when the guest is no longer
// desired.
type Worker struct {
	c    *Config
	id   string
	kick chan struct{}

	failures int
	// terminal is the desired version a permanent failure was seen at;
	// it is not retried until what is desired changes.
	terminal string
}

// NewWorker returns the worker of guest id; Run runs it.
func (c *Config) NewWorker(id string) *Worker {
	return &Worker{c: c, id: id, kick: make(chan struct{}, 1)}
}

// Kick asks the worker for a pass soon.
func (w *Worker) Kick() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Run reconciles the guest on every kick, retrying failures with
// backoff, until ctx ends or the guest is no longer desired.
func (w *Worker) Run(ctx context.Context) {
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
		g := w.c.Node.Current(w.id)
		if g == nil {
			return
		}
		// While backing off, only a change to the guest cuts the wait
		// short; periodic kicks do not.
		want := desiredVersion(g)
		if v := w.c.Volumes.GuestVolume(g.Id); v != nil {
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
		case errors.Is(err, drivers.ErrUnknownImage), errors.Is(err, drivers.ErrNotSupported), errors.Is(err, drivers.ErrInvalidSpec), errors.Is(err, ErrNoDriver):
			w.terminal = want
			w.c.Node.SetObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedFailed, Message: err.Error()})
			w.c.Logger.Error("guest failed permanently", "guest", g.Name, "error", err)
		default:
			w.failures++
			delay := min(time.Duration(1<<min(w.failures, 6))*time.Second/2, 30*time.Second)
			w.c.Node.SetObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedFailed, Message: err.Error()})
			w.c.Logger.Warn("reconciling guest failed", "guest", g.Name, "error", err, "retry_in", delay)
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

// ErrNoDriver: the guest's driver does not run on this node (a
// permanent failure until the guest's spec changes).
var ErrNoDriver = errors.New("driver is not available on this node")

// reconcile makes the guest what g says, timing the pass; an error
// carries the step that failed (see failedStep).
func (w *Worker) reconcile(ctx context.Context, g *corpusv1.Guest) error {
	start := time.Now()
	err := w.converge(ctx, g)
	if w.c.Reconciled != nil {
		w.c.Reconciled(g, time.Since(start), err)
	}
	return err
}

func (w *Worker) converge(ctx context.Context, g *corpusv1.Guest) error {
	c := w.c
	d, ok := c.Drivers[g.Spec.GetDriver()]
	if !ok {
		return AtStep("driver", fmt.Errorf("%s: %w", g.Spec.GetDriver(), ErrNoDriver))
	}
	st, err := d.Inspect(ctx, g.Name)
	exists := err == nil
	if err != nil && !errors.Is(err, drivers.ErrNotFound) {
		return AtStep("inspect", fmt.Errorf("inspecting: %w", err))
	}
	if exists && st.ID != g.Id {
		c.Logger.Info("replacing a stale guest of the same name", "guest", g.Name, "stale_id", st.ID)
		if err := d.Destroy(ctx, g.Name); err != nil {
			return AtStep("destroy", fmt.Errorf("removing stale guest: %w", err))
		}
		exists = false
	}
	if g.DesiredState == corpusv1.DesiredDeleted {
		if exists {
			if err := d.Destroy(ctx, g.Name); err != nil {
				return AtStep("destroy", fmt.Errorf("destroying: %w", err))
			}
			c.Logger.Info("guest destroyed", "guest", g.Name)
		}
		c.Node.SetObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedDeleted})
		return nil
	}
	if v := c.Volumes.GuestVolume(g.Id); v != nil && c.Volumes.Available() && exists {
		if err := c.Volumes.ResizeGuest(ctx, d, g, c.StopTimeout); err != nil {
			return AtStep("volume", err)
		}
		if st, err = d.Inspect(ctx, g.Name); err != nil {
			return AtStep("inspect", fmt.Errorf("inspecting: %w", err))
		}
	}
	if exists && d.Capabilities().Converge {
		// The driver compares the guest with its spec itself: spec
		// changes and hand edits in the engine are written back.
		spec, err := c.driverSpec(ctx, d, g)
		if err != nil {
			return AtStep("converge", err)
		}
		if err := d.Create(ctx, spec, nil); err != nil {
			return AtStep("converge", fmt.Errorf("converging: %w", err))
		}
		if st, err = d.Inspect(ctx, g.Name); err != nil {
			return AtStep("inspect", fmt.Errorf("inspecting: %w", err))
		}
	}
	if !exists {
		if err := w.create(ctx, d, g); err != nil {
			return AtStep("create", err)
		}
		if st, err = d.Inspect(ctx, g.Name); err != nil {
			return AtStep("inspect", fmt.Errorf("inspecting new guest: %w", err))
		}
	}
	waiting := c.Node.Waiting(g.Id)
	switch {
	case g.DesiredState == corpusv1.DesiredRunning && st.State != drivers.StateRunning && waiting != "":
		// Started once the services it depends on are healthy (the
		// watch says so, and wakes this worker).
		c.Node.SetObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedStarting, Message: "waiting for " + waiting})
		return nil
	case g.DesiredState == corpusv1.DesiredRunning && st.State != drivers.StateRunning && st.State != drivers.StateStarting:
		// Not when starting: started already, on its way (a container
		// mid-start, a Kubernetes workload whose pod is not ready); it
		// is observed as it is (below), and a start again would change
		// nothing but cost the driver's calls on every pass (Kubernetes:
		// a read of the workload, for each such guest).
		//
		// The driver's message is kept: a guest that stays starting (a
		// cluster pulling an image) does not flap between two reports.
		c.Node.SetObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedStarting, Message: st.Message})
		if c.Network != nil && d.Capabilities().HostNetwork {
			if _, err := c.Network(ctx, g); err != nil {
				return AtStep("network", err)
			}
		}
		if err := c.Volumes.AttachBlockVolume(ctx, d, g); err != nil {
			return AtStep("volume", err)
		}
		if rm, ok := d.(drivers.IDRemapper); ok {
			// A guest given another range (one of its own, where it
			// shared one) moves to it now.
			if err := rm.RemapIDs(ctx, g.Name, g.IdRange); err != nil {
				return AtStep("ids", err)
			}
		}
		if err := d.Start(ctx, g.Name); err != nil {
			return AtStep("start", fmt.Errorf("starting: %w", err))
		}
		c.Logger.Info("guest started", "guest", g.Name)
	case g.DesiredState == corpusv1.DesiredStopped && st.State == drivers.StateRunning:
		c.Node.SetObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedStopping})
		if err := d.Stop(ctx, g.Name, c.StopTimeout); err != nil {
			return AtStep("stop", fmt.Errorf("stopping: %w", err))
		}
		c.Logger.Info("guest stopped", "guest", g.Name)
	default:
		c.Node.SetObserved(g.Id, observedFrom(st))
		return nil
	}
	st, err = d.Inspect(ctx, g.Name)
	if err != nil {
		return AtStep("inspect", fmt.Errorf("inspecting: %w", err))
	}
	c.Node.SetObserved(g.Id, observedFrom(st))
	return nil
}

func (w *Worker) create(ctx context.Context, d drivers.Driver, g *corpusv1.Guest) error {
	c := w.c
	c.Node.SetObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedCreating})
	e := cache.Entry{GuestID: g.Id, GuestName: g.Name, Driver: g.Spec.GetDriver(), Op: "create", Started: time.Now()}
	if err := c.Journal.Begin(e); err != nil {
		return fmt.Errorf("journaling create: %w", err)
	}
	spec, err := c.driverSpec(ctx, d, g)
	if err != nil {
		return err
	}
	progress := func(msg string) {
		c.Node.SetObserved(g.Id, &corpusv1.GuestObserved{State: corpusv1.ObservedCreating, Message: msg})
	}
	start := time.Now()
	if err := d.Create(ctx, spec, progress); err != nil {
		// Leave the journal entry: the next start cleans up the remains.
		return fmt.Errorf("creating: %w", err)
	}
	c.Logger.Info("guest created", "guest", g.Name, "image", spec.Image, "took", time.Since(start).Round(time.Millisecond))
	return c.Journal.End(e)
}

// driverSpec is what the guest's driver needs to make g: with the node's
// network and host volume when the agent runs them, else with the
// volume for the driver to keep itself.
func (c *Config) driverSpec(ctx context.Context, d drivers.Driver, g *corpusv1.Guest) (drivers.GuestSpec, error) {
	spec := drivers.GuestSpec{
		ID: g.Id, Name: g.Name, Image: g.Spec.GetImage(), Packages: g.Spec.GetPackages(),
		Command: g.Spec.GetCommand(), Args: g.Spec.GetArgs(),
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
	if c.Node.Project(g.Id) != "" {
		// A project's guest runs its processes under the supervisor; a
		// driver whose guests run an image's command runs it as that.
		spec.Boot = runtime.Boot(deploy.ProjectsRoot)
	}
	caps := d.Capabilities()
	if c.Network != nil && caps.HostNetwork {
		n, err := c.Network(ctx, g)
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
		mounts, err := c.Volumes.Mounts(ctx, g)
		if err != nil {
			return spec, err
		}
		spec.Mounts = mounts
	case drivers.BlockVolumes:
		bv, err := c.Volumes.BlockVolume(ctx, g)
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
		if v := c.Volumes.GuestVolume(g.Id); v != nil {
			spec.Volume.Name, spec.Volume.SizeBytes = v.Name, v.SizeBytes // resized since
		}
	default:
		// Permanent until the guest's spec changes.
		return spec, fmt.Errorf("driver %s cannot give a guest a volume: %w", d.Name(), drivers.ErrNotSupported)
	}
	return spec, nil
}

// recoverParallel is how many interrupted creates RecoverJournal settles
// at a time.
const recoverParallel = 8

// RecoverJournal settles the creates a crash interrupted, before the
// workers start. What a converging driver (Capabilities.Converge) made
// of the guest is kept: its worker's first pass calls Create, which
// finishes it as a pass finishes any guest that lost an object. Any
// other driver's remains are removed, and the worker creates the guest
// again from scratch. Removals run recoverParallel at a time, so a node
// restarted in the middle of many creates does not start late by one
// removal after another.
func (c *Config) RecoverJournal(ctx context.Context) error {
	entries, err := c.Journal.Journal()
	if err != nil {
		return err
	}
	errs := make([]error, len(entries))
	sem := make(chan struct{}, recoverParallel)
	var wg sync.WaitGroup
	for i, e := range entries {
		d, ok := c.Drivers[e.Driver]
		if ok && e.Op == "create" && !d.Capabilities().Converge {
			c.Logger.Info("cleaning up an interrupted create", "guest", e.GuestName, "started", e.Started)
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := d.Destroy(ctx, e.GuestName); err != nil {
					errs[i] = fmt.Errorf("cleaning up %s: %w", e.GuestName, err)
					return
				}
				errs[i] = c.Journal.End(e)
			}()
			continue
		}
		if ok && e.Op == "create" {
			c.Logger.Info("finishing an interrupted create in place", "guest", e.GuestName, "driver", e.Driver, "started", e.Started)
		}
		errs[i] = c.Journal.End(e)
	}
	wg.Wait()
	return errors.Join(errs...)
}

func observedFrom(st drivers.GuestStatus) *corpusv1.GuestObserved {
	return &corpusv1.GuestObserved{State: string(st.State), Pid: int64(st.PID), Message: st.Message, ImageDigest: st.ImageDigest, ImagePorts: st.ImagePorts}
}

// stepError is a guest reconcile that failed at step.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// AtStep marks err as failing at step (nil stays nil).
func AtStep(step string, err error) error {
	if err == nil {
		return nil
	}
	return &stepError{step: step, err: err}
}

// FailedStep is the step err failed at, "other" when unmarked.
func FailedStep(err error) string {
	var se *stepError
	if errors.As(err, &se) {
		return se.step
	}
	return "other"
}
