// Package oci pulls OCI images from registries and unpacks them into root
// file systems for guests.
//
// A Store is one node's cache, in a folder of its own:
//
//	<Root>/
//	  blobs/sha256/<hex>   compressed layers, each verified against its
//	                       digest before it is renamed into place, shared
//	                       by every image that has it
//	  tmp/                 blobs being downloaded
//
// Pull resolves a reference to the image's manifest digest, config and
// layers, and fetches the layers the cache lacks. Unpack applies them in
// order into a folder named by the caller (one per image digest), through
// a temporary folder renamed into place only once every layer is applied
// and its uncompressed digest matched the config's diff_id: a folder that
// exists is complete. Unpacking resolves every path inside the tree
// (openat2 with RESOLVE_IN_ROOT: absolute symlinks and ".." stay inside),
// honours whiteouts, opaque folders, hard links, set-id bits, owners and
// the user.* and security.capability xattrs, and creates no device node.
//
// Registries are reached over HTTPS with the system's CAs; plain HTTP only
// for a registry on a loopback address or one the operator marked
// insecure (Store.Insecure), whatever the registry's address.
package oci
