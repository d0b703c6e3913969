// Package fakedriver is a fake, for tests only: a driver that keeps its
// guests in memory instead of running them, so the agent's composition
// (watch, reconcile, report, restart) can be tested in-process, in
// seconds and without root. It keeps the drivers contract (idempotent
// Create, Start, Stop and Destroy; ErrNotFound, ErrExists), records
// every call that changes a guest, and returns the error a test gives it
// for an operation. It is in no catalog: only tests build one. Guests
// outlive the agents that use the driver, as real ones outlive the agent
// process.
package fakedriver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"corpus/drivers"
)

// Call is one call that changes guests: Op is create, start, stop or
// destroy.
type Call struct {
	Op, Guest string
}

// Driver is the fake driver.
type Driver struct {
	name string
	caps drivers.Capabilities

	mu      sync.Mutex
	guests  map[string]*drivers.GuestStatus // by name
	calls   []Call
	fail    map[string]error // by op
	nextPID int
}

var _ drivers.Driver = (*Driver)(nil)

// New returns a fake driver registered as name whose guests may use
// images.
func New(name string, images ...string) *Driver {
	return &Driver{name: name, caps: drivers.Capabilities{Images: images},
		guests: map[string]*drivers.GuestStatus{}, fail: map[string]error{}, nextPID: 1000}
}

// Fail makes every later call of op (create, start, stop, destroy) return
// err, until Fail(op, nil).
func (d *Driver) Fail(op string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail[op] = err
}

// Calls returns the calls that changed guests so far, oldest first.
func (d *Driver) Calls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.calls)
}

// Guest returns the guest of that name as the driver holds it.
func (d *Driver) Guest(name string) (drivers.GuestStatus, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, ok := d.guests[name]
	if !ok {
		return drivers.GuestStatus{}, false
	}
	return *g, true
}

// call records op on guest and returns the error set for op; d.mu is
// held.
func (d *Driver) call(op, guest string) error {
	d.calls = append(d.calls, Call{op, guest})
	if err := d.fail[op]; err != nil {
		return fmt.Errorf("fake %s of %s: %w", op, guest, err)
	}
	return nil
}

func (d *Driver) Name() string                       { return d.name }
func (d *Driver) Capabilities() drivers.Capabilities { return d.caps }

func (d *Driver) Fingerprint(context.Context) drivers.Fingerprint {
	return drivers.Fingerprint{Healthy: true, Attributes: map[string]string{"fake": "true"}}
}

func (d *Driver) Create(_ context.Context, spec drivers.GuestSpec, _ drivers.ProgressFunc) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if g, ok := d.guests[spec.Name]; ok {
		if g.ID != spec.ID {
			return fmt.Errorf("creating %s: %w", spec.Name, drivers.ErrExists)
		}
		return nil
	}
	if err := d.call("create", spec.Name); err != nil {
		return err
	}
	if len(d.caps.Images) > 0 && !slices.Contains(d.caps.Images, spec.Image) {
		return fmt.Errorf("image %q: %w", spec.Image, drivers.ErrUnknownImage)
	}
	d.guests[spec.Name] = &drivers.GuestStatus{ID: spec.ID, Name: spec.Name, Image: spec.Image, State: drivers.StateStopped,
		MemoryBytes: spec.MemoryBytes, CPUMillis: spec.CPUMillis}
	return nil
}

func (d *Driver) Start(_ context.Context, name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, ok := d.guests[name]
	if !ok {
		return fmt.Errorf("starting %s: %w", name, drivers.ErrNotFound)
	}
	if g.State == drivers.StateRunning {
		return nil
	}
	if err := d.call("start", name); err != nil {
		return err
	}
	d.nextPID++
	g.State, g.PID = drivers.StateRunning, d.nextPID
	return nil
}

func (d *Driver) Stop(_ context.Context, name string, _ time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, ok := d.guests[name]
	if !ok {
		return fmt.Errorf("stopping %s: %w", name, drivers.ErrNotFound)
	}
	if g.State != drivers.StateRunning {
		return nil
	}
	if err := d.call("stop", name); err != nil {
		return err
	}
	g.State, g.PID = drivers.StateStopped, 0
	return nil
}

func (d *Driver) Destroy(_ context.Context, name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.guests[name]; !ok {
		return nil
	}
	if err := d.call("destroy", name); err != nil {
		return err
	}
	delete(d.guests, name)
	return nil
}

func (d *Driver) Inspect(_ context.Context, name string) (drivers.GuestStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, ok := d.guests[name]
	if !ok {
		return drivers.GuestStatus{}, fmt.Errorf("inspecting %s: %w", name, drivers.ErrNotFound)
	}
	return *g, nil
}

func (d *Driver) List(context.Context) ([]drivers.GuestStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]drivers.GuestStatus, 0, len(d.guests))
	for _, g := range d.guests {
		out = append(out, *g)
	}
	return out, nil
}

// Exec runs nothing: the fake's guests have no processes.
func (d *Driver) Exec(context.Context, string, drivers.ExecRequest) (int, error) {
	return 0, fmt.Errorf("fake driver: %w", drivers.ErrNotSupported)
}
