// Package load reads how busy a node's guests are: the CPU time a guest
// used, from the cgroup its init process runs in (cgroup v2 cpu.stat, or
// v1 cpuacct.usage). The coordinator's autoscaler samples it twice and
// takes the rate; nothing here keeps state. Sampler serves it to the
// coordinators.
package load

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Root is where the host mounts its cgroup hierarchies.
var Root = "/sys/fs/cgroup"

// CPU returns the CPU time, in seconds, used by the cgroup of process pid
// (the guest's init: its cgroup holds the whole guest) and what is below.
func CPU(pid int) (float64, error) {
	if pid <= 0 {
		return 0, errors.New("no process to read the cgroup of")
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var v1, v2 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case hasController(parts[1], "cpuacct"):
			v1 = filepath.Join(parts[1], parts[2])
		}
	}
	if v1 != "" {
		raw, err := os.ReadFile(filepath.Join(Root, guestGroup(v1), "cpuacct.usage"))
		if err != nil {
			return 0, err
		}
		ns, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cpuacct.usage: %w", err)
		}
		return float64(ns) / 1e9, nil
	}
	if v2 == "" {
		return 0, fmt.Errorf("process %d is in no cpu cgroup", pid)
	}
	raw, err := os.ReadFile(filepath.Join(Root, guestGroup(v2), "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cpu.stat: %w", err)
			}
			return float64(us) / 1e6, nil
		}
	}
	return 0, errors.New("cpu.stat has no usage_usec")
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// guestGroup is the group that holds the whole guest: an init in an
// init.scope (systemd in the guest) counts with its parent.
func guestGroup(p string) string {
	if filepath.Base(p) == "init.scope" {
		return filepath.Dir(p)
	}
	return p
}
