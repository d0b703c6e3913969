package drivers

import (
	"context"
	"time"
)

// Unsupported is the Driver of a build that cannot run a driver (the
// wrong OS, no cgo): every method fails with Err, which should wrap
// ErrNotSupported, and Fingerprint reports it unhealthy. Drivers embed it
// in their stand-in type for such builds.
type Unsupported struct {
	DriverName string
	Err        error
}

// Name returns the driver's name.
func (u Unsupported) Name() string { return u.DriverName }

// Capabilities reports no abilities.
func (Unsupported) Capabilities() Capabilities { return Capabilities{} }

// Fingerprint reports the driver as unhealthy.
func (u Unsupported) Fingerprint(context.Context) Fingerprint {
	return Fingerprint{Detail: u.Err.Error()}
}

// Create returns Err.
func (u Unsupported) Create(context.Context, GuestSpec, ProgressFunc) error { return u.Err }

// Start returns Err.
func (u Unsupported) Start(context.Context, string) error { return u.Err }

// Stop returns Err.
func (u Unsupported) Stop(context.Context, string, time.Duration) error { return u.Err }

// Destroy returns Err.
func (u Unsupported) Destroy(context.Context, string) error { return u.Err }

// Inspect returns Err.
func (u Unsupported) Inspect(context.Context, string) (GuestStatus, error) {
	return GuestStatus{}, u.Err
}

// List returns Err.
func (u Unsupported) List(context.Context) ([]GuestStatus, error) { return nil, u.Err }

// Exec returns Err.
func (u Unsupported) Exec(context.Context, string, ExecRequest) (int, error) { return -1, u.Err }
