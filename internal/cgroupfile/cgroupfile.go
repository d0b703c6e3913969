// Package cgroupfile reads a file of the cgroup a process is in, on
// cgroup v1 (the controller's own hierarchy) and v2 hosts alike: how
// tests check from the host what limits a guest runs under.
package cgroupfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Root is where the host mounts its cgroup hierarchies.
const Root = "/sys/fs/cgroup"

// Read returns the trimmed content of file (e.g. "pids.max") in the
// cgroup of pid that holds controller (e.g. "pids").
func Read(pid int, controller, file string) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		var dir string
		switch {
		case f[1] == controller:
			dir = filepath.Join(Root, controller, f[2])
		case f[0] == "0" && f[1] == "":
			dir = filepath.Join(Root, f[2])
		default:
			continue
		}
		if v, err := os.ReadFile(filepath.Join(dir, file)); err == nil {
			return strings.TrimSpace(string(v)), nil
		}
	}
	return "", fmt.Errorf("no %s in the %s cgroup of process %d", file, controller, pid)
}
