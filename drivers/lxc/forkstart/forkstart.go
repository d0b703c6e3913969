//go:build linux && cgo

// Package forkstart starts LXC containers from a short-lived child
// process running this same binary (LXD's "forkstart"), not from the
// driver's process. A daemonized liblxc start forks the container's
// monitor from the calling process and moves the caller into the
// monitor's cgroups:
//
//   - the caller, a long-running agent, would leave its own cgroups on
//     every Start, and liblxc could never remove the lxc.monitor.<name>
//     cgroups because the agent still sits in them;
//   - each monitor would be a fork of the agent, and keeps a private copy
//     of every heap page the agent later writes (measured: a monitor
//     forked from a process with a 200 MB heap grew to 209 MB RSS).
//
// The child is the binary itself (/proc/self/exe) with Env set; this
// package's init notices it, starts the container and exits before
// main runs, so every binary that imports the package can start guests.
//
// The package imports os alone and calls liblxc's C API itself: the
// linker orders package inits by import path among those whose imports
// are done, so this init runs among the first, before the hundreds of
// package inits of the rest of the binary (the Kubernetes client's
// schemes, the API's descriptors), which a start does not need. Importing
// go-lxc, fmt or os/exec (path/filepath sorts late) put it after 145 of
// them, 4.4 ms after its exec. Start, which runs the helper, lives in
// package lxc.
package forkstart

/*
#cgo LDFLAGS: -llxc
#include <stdbool.h>
#include <stdlib.h>
#include <lxc/lxccontainer.h>

// start starts container name of lxcpath path as a daemon that closes the
// files it inherits; argv, when not NULL, is a command run under liblxc's
// init instead of the container's own (lxc-execute). It returns 0, or
// which step failed.
static int start(const char *path, const char *name, char *const argv[]) {
	struct lxc_container *c = lxc_container_new(name, path);
	if (!c)
		return 1;
	int rc = 0;
	if (!c->want_daemonize(c, true) || !c->want_close_all_fds(c, true))
		rc = 2;
	else if (!c->start(c, argv ? 1 : 0, argv))
		rc = 3;
	lxc_container_put(c);
	return rc;
}
*/
import "C"

import (
	"os"
	"unsafe"
)

// Env marks the process as the start helper.
const Env = "_CORPUS_LXC_START_HELPER"

func init() {
	if os.Getenv(Env) == "1" {
		os.Exit(helper(os.Args[1:]))
	}
}

// helper starts container args[1] of lxcpath args[0] as a daemon and
// returns the process's exit status; errors go to stderr. Further
// arguments are a command the container runs under liblxc's init
// instead of its own init (an application container, lxc-execute).
func helper(args []string) int {
	if len(args) < 2 {
		os.Stderr.WriteString("start helper: want lxcpath and name\n")
		return 2
	}
	path, name := C.CString(args[0]), C.CString(args[1])
	defer C.free(unsafe.Pointer(path))
	defer C.free(unsafe.Pointer(name))
	var argv **C.char
	if len(args) > 2 {
		cargs := make([]*C.char, len(args)-1) // NULL-terminated
		for i, a := range args[2:] {
			cargs[i] = C.CString(a)
			defer C.free(unsafe.Pointer(cargs[i]))
		}
		argv = (**C.char)(C.malloc(C.size_t(len(cargs)) * C.size_t(unsafe.Sizeof(cargs[0]))))
		defer C.free(unsafe.Pointer(argv))
		copy(unsafe.Slice(argv, len(cargs)), cargs)
	}
	switch C.start(path, name, argv) {
	case 0:
		return 0
	case 1:
		os.Stderr.WriteString("opening container " + args[1] + " in " + args[0] + " failed\n")
	case 2:
		os.Stderr.WriteString("setting the daemonize options failed\n")
	default:
		os.Stderr.WriteString("the container failed to start\n")
	}
	return 1
}
