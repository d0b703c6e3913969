package proxy

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"corpus/internal/procfs"
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
	// ErrListen means a listener could not be opened.
	ErrListen = errors.New("cannot listen")
	// ErrClosed means the proxy was shut down and cannot be used again.
	ErrClosed = errors.New("proxy closed")
	// ErrRunning means Run was called while the proxy is already running.
	ErrRunning = errors.New("proxy already running")
)

// ListenError is a listener the proxy could not open: which (http,
// https), on what address, why, and, when the address is in use, the
// process that holds it if it can be found. It wraps ErrListen, and
// syscall.EADDRINUSE when the address is in use. It is plain data: a
// proxy process sends it as JSON to the agent that started it.
type ListenError struct {
	Listener string `json:"listener"`
	Addr     string `json:"addr"`
	Reason   string `json:"reason"`
	InUse    bool   `json:"in_use,omitempty"`
	// Holder listens on the address (nil when unknown).
	Holder *procfs.Process `json:"holder,omitempty"`
}

func (e *ListenError) Error() string {
	s := fmt.Sprintf("%s %s: %v: %s", e.Listener, e.Addr, ErrListen, e.Reason)
	if e.Holder != nil {
		s += "; it is held by " + e.Holder.String()
	}
	return s
}

func (e *ListenError) Unwrap() []error {
	if e.InUse {
		return []error{ErrListen, syscall.EADDRINUSE}
	}
	return []error{ErrListen}
}

// Port is the port of Addr (0 when it names none).
func (e *ListenError) Port() int {
	_, port, _ := net.SplitHostPort(e.Addr)
	n, _ := strconv.Atoi(port)
	return n
}

// listenError describes err, from opening listener on addr.
func listenError(listener, addr string, err error) *ListenError {
	e := &ListenError{Listener: listener, Addr: addr, Reason: err.Error(), InUse: errors.Is(err, syscall.EADDRINUSE)}
	if e.InUse {
		if p, ok := procfs.TCPListener(e.Port()); ok {
			e.Holder = &p
		}
	}
	return e
}
