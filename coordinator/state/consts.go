package state

// Node statuses.
const (
	NodeInitializing = "initializing"
	NodeReady        = "ready"
	NodeDown         = "down"
)

// Guest desired states.
const (
	DesiredRunning = "running"
	DesiredStopped = "stopped"
	DesiredDeleted = "deleted"
)

// Guest observed states, as agents report them.
const (
	ObservedCreating = "creating"
	ObservedRunning  = "running"
	ObservedStopped  = "stopped"
	ObservedFailed   = "failed"
	ObservedDeleted  = "deleted"
)
