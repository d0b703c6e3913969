// Package lxc runs corpus guests as LXC system containers through liblxc
// (github.com/lxc/go-lxc): unprivileged, in a user namespace of their
// own ids, unless the spec asks for a privileged one (see
// security_linux.go for the confinement of each).
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
//	  .images/
//	    busybox/      image cache, built once by the lxc template
//	    busybox.json  marker written when the cache is complete
//	    busybox-u1000000-1000000/
//	                  its copy owned by unprivileged guests' ids (see
//	                  idmap_linux.go), made once from the cache
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
