// Package listen is what a daemon knows of the addresses it listens on:
// whether a listener listens on an address, and, for one it could not
// open, an Error that says why and which process holds the address (as
// plain data, which a process can hand to the one that started it).
package listen

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"corpus/internal/procfs"
)

// ErrFailed is wrapped by every Error: a listener could not be opened.
var ErrFailed = errors.New("cannot listen")

// Error is a listener that could not be opened: which (its role, "http",
// "https"), on what address, why, and, when the address is in use, the
// process that holds it if it can be found. It wraps ErrFailed, and
// syscall.EADDRINUSE when the address is in use.
type Error struct {
	Listener string `json:"listener"`
	Addr     string `json:"addr"`
	Reason   string `json:"reason"`
	InUse    bool   `json:"in_use,omitempty"`
	// Holder listens on the address (nil when unknown).
	Holder *procfs.Process `json:"holder,omitempty"`
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s %s: %v: %s", e.Listener, e.Addr, ErrFailed, e.Reason)
	if e.Holder != nil {
		s += "; it is held by " + e.Holder.String()
	}
	return s
}

func (e *Error) Unwrap() []error {
	if e.InUse {
		return []error{ErrFailed, syscall.EADDRINUSE}
	}
	return []error{ErrFailed}
}

// Port is the port of Addr (0 when it names none).
func (e *Error) Port() int {
	_, port, _ := net.SplitHostPort(e.Addr)
	n, _ := strconv.Atoi(port)
	return n
}

// Describe is err, met opening the TCP listener called listener on
// addr, as an Error: an address in use names the process that holds it
// (procfs.TCPListener), looked up now, in this network namespace.
func Describe(listener, addr string, err error) *Error {
	e := &Error{Listener: listener, Addr: addr, Reason: err.Error(), InUse: errors.Is(err, syscall.EADDRINUSE)}
	if e.InUse {
		if p, ok := procfs.TCPListener(e.Port()); ok {
			e.Holder = &p
		}
	}
	return e
}

// On says whether ln listens on addr (host:port; an empty or unspecified
// host means every address, port 0 any port).
func On(ln net.Listener, addr string) bool {
	ta, ok := ln.Addr().(*net.TCPAddr)
	host, port, err := net.SplitHostPort(addr)
	if !ok || err != nil || (port != "0" && strconv.Itoa(ta.Port) != port) {
		return false
	}
	ip := net.ParseIP(host)
	if host == "" || ip.IsUnspecified() {
		return ta.IP.IsUnspecified()
	}
	return ta.IP.Equal(ip)
}
