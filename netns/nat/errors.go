package nat

import "errors"

var (
	// ErrNotSupported is returned on operating systems other than Linux.
	ErrNotSupported = errors.New("NAT is not supported on this OS")
	// ErrInvalid is wrapped by every validation error of a Config or
	// Desired.
	ErrInvalid = errors.New("invalid NAT configuration")
	// ErrConflict means two forwards claim the same host port.
	ErrConflict = errors.New("conflicting forwards")
)
