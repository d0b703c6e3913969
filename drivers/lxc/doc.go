// Package lxc runs corpus guests as LXC system containers through liblxc
// (github.com/lxc/go-lxc): unprivileged, in a user namespace mapped to a
// range of the host's ids of their own (see idmap_linux.go), unless the
// spec asks for a privileged one (see security_linux.go for the
// confinement of each).
//
// A Driver owns one lxcpath (Config.Path). Guests are containers directly
// under it, each marked by a corpus.json metadata file in its directory;
// containers without that file are not guests and are never listed. Image
// caches live in a separate lxcpath, <Path>/.images, so they can never be
// mistaken for guests:
//
//	<Path>/
//	  web/            guest container (config, corpus.json, lxc.log, rootfs
//	                  or overlay delta)
//	  .image-mounts/
//	    web           the image cache's root file system as web's ids see
//	                  it, its overlay's lower folder (idmount_linux.go)
//	  .images/
//	    busybox/      image cache, built once by the lxc template
//	    busybox.json  marker written when the cache is complete
//	    busybox-u1065536-1065536/
//	                  its copy owned by one id range, made once from the
//	                  cache where guests cannot stack on an idmapped mount
//	  .oci/           OCI image layers by digest; images pulled from
//	                  them are unpacked into .images/oci-<hex>
//	                  (oci_linux.go)
//	  .seccomp        the guests' seccomp policy
//
// A guest's life:
//
//	        Create            Start
//	(none) ────────▶ stopped ───────▶ running ─┐
//	  ▲                 │   ◀───────     │  ▲  │ Exec
//	  │                 │     Stop       │  └──┘
//	  └──── Destroy ────┴────────────────┘
//	      (kills a running guest first)
//
// Containers run daemonized: liblxc forks a monitor process per container,
// so guests outlive the process that started them. Start does not fork the
// monitor from the caller but from a short-lived re-execution of the
// running binary, recognised and served by this package's init before main
// runs (see start_linux.go for why). Only Linux with cgo is supported;
// elsewhere New returns an error wrapping drivers.ErrNotSupported.
package lxc
