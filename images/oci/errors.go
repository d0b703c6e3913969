package oci

import "errors"

var (
	// ErrDigestMismatch is returned (wrapped) when a layer's bytes or
	// its uncompressed content do not have the digest the image names.
	ErrDigestMismatch = errors.New("digest mismatch")
	// ErrPlainHTTP is returned (wrapped) when a registry would be reached
	// over plain HTTP without being on a loopback address or marked
	// insecure.
	ErrPlainHTTP = errors.New("plain HTTP refused for a registry not marked insecure")
	// ErrUnauthorized is returned (wrapped) when a registry refuses a
	// pull's credentials, or wants some and the pull had none.
	ErrUnauthorized = errors.New("not authorized")
	// ErrNotSupported is returned (wrapped) where unpacking cannot run
	// (not Linux).
	ErrNotSupported = errors.New("unpacking OCI images is not supported on this OS")
)
