//go:build linux && cgo

package lxc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroupRoot is where the host mounts its cgroup hierarchies.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupVersion tells which cgroup keys apply to guests on this host: 2
// when /sys/fs/cgroup is a pure cgroup2 mount, 1 on legacy and hybrid hosts,
// whose memory and cpu controllers sit in v1 hierarchies.
func cgroupVersion() (int, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(cgroupRoot, &st); err != nil {
		return 0, fmt.Errorf("detecting cgroup version: %w", err)
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return 2, nil
	}
	return 1, nil
}

// apparmorEnabled reports whether the kernel enforces AppArmor. Without it,
// an lxc.apparmor.* setting inherited from /etc/lxc/default.conf can make
// liblxc refuse to start a container.
func apparmorEnabled() bool {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("Y"))
}

// overlaySupported reports whether an overlayfs snapshot can be used for
// guests under path: the kernel must know overlayfs, and path must not sit
// on overlayfs itself (an upper directory cannot live there).
func overlaySupported(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil || st.Type == unix.OVERLAYFS_SUPER_MAGIC {
		return false
	}
	f, err := os.Open("/proc/filesystems")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 && fields[len(fields)-1] == "overlay" {
			return true
		}
	}
	return false
}
