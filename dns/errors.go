package dns

import "errors"

var (
	// ErrBadRecord means a Record could not be parsed or is of a type the
	// zone does not hold.
	ErrBadRecord = errors.New("bad record")
	// ErrOutOfZone means a record's owner name is not inside the zone.
	ErrOutOfZone = errors.New("name outside zone")
	// ErrCNAMEConflict means a name has a CNAME and other data, or two CNAMEs.
	ErrCNAMEConflict = errors.New("CNAME and other data at one name")
	// ErrDelegation means an NS record below the apex was given; the zone
	// has no delegations.
	ErrDelegation = errors.New("delegations are not supported")
	// ErrBadConfig means a Config or ResolverConfig failed validation.
	ErrBadConfig = errors.New("bad dns config")
	// ErrNotStarted means an address was asked of a server that is not
	// listening.
	ErrNotStarted = errors.New("dns server not started")
	// ErrAlreadyStarted means Start was called twice.
	ErrAlreadyStarted = errors.New("dns server already started")
	// ErrNoUpstream means the resolver has no upstream server to forward to,
	// or none of them answered.
	ErrNoUpstream = errors.New("no upstream answered")
)
