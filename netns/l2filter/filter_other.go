//go:build !linux

package l2filter

import "context"

// Apply returns ErrNotSupported on this OS.
func (f *Filter) Apply(ctx context.Context, ports []Port) (Changes, error) {
	return Changes{}, ErrNotSupported
}

// Observed returns ErrNotSupported on this OS.
func (f *Filter) Observed(ctx context.Context) (State, error) { return State{}, ErrNotSupported }

// Remove returns ErrNotSupported on this OS.
func (f *Filter) Remove(ctx context.Context) error { return ErrNotSupported }
