package l2filter

import "errors"

var (
	// ErrNotSupported is returned on operating systems other than Linux.
	ErrNotSupported = errors.New("layer-2 filtering of guests is not supported on this OS")
	// ErrInvalid is wrapped by every validation error of a Config or of
	// the ports given to Apply.
	ErrInvalid = errors.New("invalid layer-2 filter")
	// ErrConflict means two ports claim the same interface, MAC or
	// address.
	ErrConflict = errors.New("conflicting guest ports")
)
