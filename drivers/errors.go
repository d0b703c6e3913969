package drivers

import "errors"

var (
	// ErrNotFound means the named guest does not exist on this host.
	ErrNotFound = errors.New("guest not found")
	// ErrExists means a guest of that name exists with another ID.
	ErrExists = errors.New("guest exists with another id")
	// ErrUnknownImage means the driver cannot build or fetch that image.
	ErrUnknownImage = errors.New("unknown image")
	// ErrNotRunning means the operation needs a running guest.
	ErrNotRunning = errors.New("guest is not running")
	// ErrRunning means the operation needs a stopped guest.
	ErrRunning = errors.New("guest is running")
	// ErrNotReady means the guest runs but cannot take the request yet
	// (its guest agent does not answer while it boots); retry later.
	ErrNotReady = errors.New("guest is not ready")
	// ErrNotSupported means this driver or host cannot do that.
	ErrNotSupported = errors.New("not supported")
)

// ErrInvalidSpec means the guest's spec cannot be run by this driver (a
// malformed image reference, a name the engine refuses). Nothing was
// changed; retrying the same spec fails the same way.
var ErrInvalidSpec = errors.New("invalid guest spec")
