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
// The package imports nothing but the standard library's basics and
// go-lxc: Go initialises packages in import path order as their imports
// are ready, so the helper's init runs among the first, before the
// hundreds of package inits of the rest of the binary (the Kubernetes
// client's schemes, the API's descriptors), which a start does not need.
package forkstart

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	golxc "github.com/lxc/go-lxc"
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
// arguments are a command the container runs under liblxc's init.lxc
// instead of its own init (an application container, lxc-execute).
func helper(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "start helper: want lxcpath and name")
		return 2
	}
	c, err := golxc.NewContainer(args[1], args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Release()
	for _, err := range []error{c.WantDaemonize(true), c.WantCloseAllFds(true)} {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	start := c.Start
	if len(args) > 2 {
		start = func() error { return c.StartExecute(args[2:]) }
	}
	if err := start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// shadowTools are the setuid helpers of the shadow suite that write a
// process's id maps. liblxc runs them (through sh -c, one per map) to
// map a guest's ids whenever it finds both on PATH, even as root, which
// can write the maps itself: measured, 4 ms of a 7 ms lxc-start.
var shadowTools = []string{"newuidmap", "newgidmap"}

// helperPath is path without the folders that hold a shadow tool, so
// that liblxc, running as root in the helper, writes the guest's id maps
// itself. What the tools would check (that root's /etc/subuid grants the
// range) the driver checked when it chose the range from that file. The
// tools' folders (/usr/bin, /bin) hold nothing else a start runs:
// apparmor_parser, where AppArmor is on, lives in sbin.
func helperPath(path string) string {
	var keep []string
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !slices.ContainsFunc(shadowTools, func(tool string) bool {
			fi, err := os.Stat(filepath.Join(dir, tool))
			return err == nil && !fi.IsDir()
		}) {
			keep = append(keep, dir)
		}
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}

// Start runs the start helper for container name in path, with the
// command it runs when not empty (see helper).
func Start(path, name string, command []string) error {
	cmd := exec.Command("/proc/self/exe", append([]string{path, name}, command...)...)
	cmd.Args[0] = "corpus-lxc-start"
	// A clean environment: the monitor and hooks inherit it. GORACE is
	// read only by race-enabled builds, whose exit otherwise sleeps 1s.
	cmd.Env = []string{
		Env + "=1",
		"PATH=" + helperPath(os.Getenv("PATH")),
		"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"),
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The monitor closes the files it inherits; should it not, do not
	// wait on it.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(out.String()); msg != "" {
			return fmt.Errorf("start helper: %w: %s", err, msg)
		}
		return fmt.Errorf("start helper: %w", err)
	}
	return nil
}
