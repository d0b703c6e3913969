//go:build !linux || !cgo

package lxc

import (
	"context"
	"fmt"
	"time"

	"corpus/drivers"
)

var _ drivers.Driver = (*Driver)(nil)

// errUnsupported explains why this build has no LXC driver.
var errUnsupported = fmt.Errorf("lxc driver is not supported on this OS (it needs linux and cgo): %w", drivers.ErrNotSupported)

// Driver is a stand-in on builds without LXC support; New never returns one.
type Driver struct{}

// New returns an error wrapping drivers.ErrNotSupported: LXC needs Linux
// and cgo.
func New(cfg Config) (*Driver, error) {
	return nil, errUnsupported
}

// Name returns "lxc".
func (*Driver) Name() string { return Name }

// Capabilities reports no abilities.
func (*Driver) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{HostNetwork: true, HostVolumes: true}
}

// Fingerprint reports the driver as unhealthy.
func (*Driver) Fingerprint(context.Context) drivers.Fingerprint {
	return drivers.Fingerprint{Detail: errUnsupported.Error()}
}

// Create returns an error wrapping drivers.ErrNotSupported.
func (*Driver) Create(context.Context, drivers.GuestSpec, drivers.ProgressFunc) error {
	return errUnsupported
}

// Start returns an error wrapping drivers.ErrNotSupported.
func (*Driver) Start(context.Context, string) error { return errUnsupported }

// Stop returns an error wrapping drivers.ErrNotSupported.
func (*Driver) Stop(context.Context, string, time.Duration) error { return errUnsupported }

// Destroy returns an error wrapping drivers.ErrNotSupported.
func (*Driver) Destroy(context.Context, string) error { return errUnsupported }

// Inspect returns an error wrapping drivers.ErrNotSupported.
func (*Driver) Inspect(context.Context, string) (drivers.GuestStatus, error) {
	return drivers.GuestStatus{}, errUnsupported
}

// List returns an error wrapping drivers.ErrNotSupported.
func (*Driver) List(context.Context) ([]drivers.GuestStatus, error) { return nil, errUnsupported }

// Exec returns an error wrapping drivers.ErrNotSupported.
func (*Driver) Exec(context.Context, string, drivers.ExecRequest) (int, error) {
	return -1, errUnsupported
}
