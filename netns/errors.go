package netns

import "errors"

var (
	// ErrNotSupported is returned on operating systems other than Linux.
	ErrNotSupported = errors.New("guest networking is not supported on this OS")
	// ErrInvalid is wrapped by every validation error of a Bridge or Veth.
	ErrInvalid = errors.New("invalid network link")
	// ErrNotBridge means a link has the bridge's name but is not a bridge;
	// corpus leaves it alone rather than replace someone else's link.
	ErrNotBridge = errors.New("link exists and is not a bridge")
	// ErrNotVeth means a link has the veth's name but is not a veth.
	ErrNotVeth = errors.New("link exists and is not a veth")
	// ErrNoBridge means a veth was to be attached to a bridge that does not
	// exist; call EnsureBridge first.
	ErrNoBridge = errors.New("bridge does not exist")
	// ErrNoLink means EnsurePort was asked for a link that does not exist.
	ErrNoLink = errors.New("link does not exist")
)
