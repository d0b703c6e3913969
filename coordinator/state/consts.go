package state

import corpusv1 "corpus/proto/corpus/v1"

// The state's vocabulary is the API's (see corpusv1's vocabulary.go).
const (
	NodeInitializing = corpusv1.NodeInitializing
	NodeReady        = corpusv1.NodeReady
	NodeDown         = corpusv1.NodeDown

	DesiredRunning = corpusv1.DesiredRunning
	DesiredStopped = corpusv1.DesiredStopped
	DesiredDeleted = corpusv1.DesiredDeleted

	ObservedCreating = corpusv1.ObservedCreating
	ObservedRunning  = corpusv1.ObservedRunning
	ObservedStopped  = corpusv1.ObservedStopped
	ObservedFailed   = corpusv1.ObservedFailed
	ObservedDeleted  = corpusv1.ObservedDeleted
)
