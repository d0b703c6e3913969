package volume

import "errors"

var (
	// ErrNotFound means the named volume does not exist.
	ErrNotFound = errors.New("volume not found")
	// ErrExists means Create or Import was asked for a volume that already
	// exists with different properties (Create of the same size succeeds).
	ErrExists = errors.New("volume already exists")
	// ErrInUse means the volume is attached or mounted and the operation
	// needs it detached or unmounted (Shrink, Delete without force, Export).
	ErrInUse = errors.New("volume in use")
	// ErrInvalid is wrapped by every validation error: a name that is not a
	// DNS label, a negative, tiny or absurd size, a relative mount target.
	ErrInvalid = errors.New("invalid volume request")
	// ErrCannotShrink is the typed refusal of a shrink: the caller did not
	// opt in with allowShrink, or the data would not fit in the new size
	// with ShrinkMargin to spare. Nothing was changed.
	ErrCannotShrink = errors.New("volume cannot be shrunk")
	// ErrNotSupported means the backend cannot run on this OS, or cannot do
	// the asked operation on this host (see Capabilities).
	ErrNotSupported = errors.New("not supported")
)
