package proxy

import (
	"errors"

	"corpus/netns/listen"
)

var (
	// ErrInvalidHost means an HTTP route's host is not a lowercase RFC 1123
	// host name.
	ErrInvalidHost = errors.New("invalid host name")
	// ErrInvalidTarget means a target is not host:port with a valid host and
	// a port in 1-65535.
	ErrInvalidTarget = errors.New("invalid target")
	// ErrNoTargets means an HTTP route lists no target.
	ErrNoTargets = errors.New("route has no targets")
	// ErrInvalidPort means a TCP route's listen port is outside 1-65535.
	ErrInvalidPort = errors.New("invalid port")
	// ErrInvalidConfig means a Config field is out of range or inconsistent.
	ErrInvalidConfig = errors.New("invalid proxy config")
	// ErrCertificate means a certificate or key file could not be loaded.
	ErrCertificate = errors.New("invalid certificate")
	// ErrListen means a listener could not be opened (New's errors are
	// *listen.Error).
	ErrListen = listen.ErrFailed
	// ErrClosed means the proxy was shut down and cannot be used again.
	ErrClosed = errors.New("proxy closed")
	// ErrRunning means Run was called while the proxy is already running.
	ErrRunning = errors.New("proxy already running")
)
