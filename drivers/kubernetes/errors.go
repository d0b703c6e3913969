package kubernetes

import "errors"

var (
	// ErrCannotShrink means a guest's volume was asked to get smaller
	// than its claim; claims only grow.
	ErrCannotShrink = errors.New("a volume claim cannot shrink")
	// ErrNotExpandable means the claim's storage class does not allow
	// volume expansion (allowVolumeExpansion is not true), so the claim
	// keeps its size.
	ErrNotExpandable = errors.New("the storage class does not allow volume expansion")
)
