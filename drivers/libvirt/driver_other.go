//go:build !linux

package libvirt

import (
	"context"
	"fmt"

	"corpus/drivers"
)

var _ drivers.Driver = (*Driver)(nil)

// errUnsupported explains why this build has no libvirt driver.
var errUnsupported = fmt.Errorf("libvirt driver is not supported on this OS (it needs linux): %w", drivers.ErrNotSupported)

// Driver is a stand-in on builds without libvirt support; New never
// returns one.
type Driver struct{ drivers.Unsupported }

// New returns an error wrapping drivers.ErrNotSupported.
func New(cfg Config) (*Driver, error) { return nil, errUnsupported }

// EnsureImage returns an error wrapping drivers.ErrNotSupported.
func (*Driver) EnsureImage(context.Context, string, drivers.ProgressFunc) error {
	return errUnsupported
}
