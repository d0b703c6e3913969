//go:build linux && cgo

package lxc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"corpus/drivers/lxc/forkstart"
)

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

// startHelper runs the start helper (package forkstart) for container
// name in path, with the command it runs when not empty.
func startHelper(path, name string, command []string) error {
	cmd := exec.Command("/proc/self/exe", append([]string{path, name}, command...)...)
	cmd.Args[0] = "corpus-lxc-start"
	// A clean environment: the monitor and hooks inherit it. GORACE is
	// read only by race-enabled builds, whose exit otherwise sleeps 1s.
	cmd.Env = []string{
		forkstart.Env + "=1",
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
