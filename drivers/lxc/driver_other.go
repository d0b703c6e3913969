//go:build !linux || !cgo

package lxc

import (
	"context"
	"fmt"

	"corpus/drivers"
)

var _ drivers.Driver = (*Driver)(nil)

// errUnsupported explains why this build has no LXC driver.
var errUnsupported = fmt.Errorf("lxc driver is not supported on this OS (it needs linux and cgo): %w", drivers.ErrNotSupported)

// Driver is a stand-in on builds without LXC support; New never returns one.
type Driver struct{ drivers.Unsupported }

// New returns an error wrapping drivers.ErrNotSupported: LXC needs Linux
// and cgo.
func New(cfg Config) (*Driver, error) {
	return nil, errUnsupported
}

// EnsureImage returns an error wrapping drivers.ErrNotSupported.
func (*Driver) EnsureImage(context.Context, string, drivers.ProgressFunc) error {
	return errUnsupported
}

// EnsureImagePackages returns an error wrapping drivers.ErrNotSupported.
func (*Driver) EnsureImagePackages(context.Context, string, []string, drivers.ProgressFunc) error {
	return errUnsupported
}
