package state

import "errors"

// Business errors returned as values in Result.Err; the API maps them to
// status codes.
var (
	ErrNotFound      = errors.New("not found")
	ErrExists        = errors.New("already exists")
	ErrInvalidToken  = errors.New("join token is invalid, expired or already used")
	ErrStale         = errors.New("object changed since it was read")
	ErrNotBootstrap  = errors.New("cluster is not bootstrapped")
	ErrInvalid       = errors.New("invalid command")
	ErrBadTransition = errors.New("invalid state transition")
	// ErrNoRoom means a node has not the resources a change asks for.
	ErrNoRoom = errors.New("the node has no room for it")
	// ErrConflict means the object cannot stand beside one the state has
	// (a DNS record beside a CNAME at its name); delete that one first.
	ErrConflict = errors.New("conflicts with what is there")
	// ErrLoginRefused is the result of a UserLogin that records a failed
	// password login.
	ErrLoginRefused = errors.New("login refused")
)
