//go:build linux && cgo

package lxc

import (
	"fmt"
	"path/filepath"

	"corpus/internal/atomicfile"
)

// A guest's confinement, written whole into its configuration (the
// templates' includes are dropped, so what a guest may do never depends
// on the host's /usr/share/lxc or on which template built its image):
//
//   - a user namespace (unprivileged guests, the default): the guest's
//     root is an unused host user, so a way out of the guest's namespaces
//     meets a process with no rights on the host. The kernel then also
//     refuses what needs the host's root: mounting a block device, mknod
//     of a device, writing /proc/sysrq-trigger, loading a module, a raw
//     socket anywhere but in the guest's own network namespace.
//   - capabilities LXC drops by default (mac_admin mac_override sys_time
//     sys_module sys_rawio);
//   - a seccomp deny list (seccompPolicy);
//   - a device allow-list: null, zero, full, random, urandom, tty,
//     console, ptmx and ptys, fuse; nothing else may be opened or made;
//   - /proc and /sys mounted "mixed" (read-only but for the guest's own
//     network settings), kernel files that tell about the host masked;
//   - a cap on processes (pidsMax), so a fork bomb stays in its guest.
//
// Privileged guests (ops only, see the API) keep everything but the user
// namespace.

// pidsMax bounds the processes and threads of one guest.
const pidsMax = 4096

// droppedCaps are LXC's default capability drops.
const droppedCaps = "mac_admin mac_override sys_time sys_module sys_rawio"

// allowedDevices are the character devices a guest may use; "m" alone
// (mknod, no access) is allowed for every device so that images which
// create nodes at boot do not fail, as in LXC's defaults.
var allowedDevices = []string{
	"c *:* m", "b *:* m",
	"c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm", // null zero full random urandom
	"c 5:0 rwm", "c 5:1 rwm", "c 5:2 rwm", // tty console ptmx
	"c 136:* rwm",  // ptys
	"c 10:229 rwm", // fuse
}

// maskedFiles and maskedDirs hide what a guest has no business reading
// about its host (kernel memory, keys, timers, firmware tables).
var (
	maskedFiles = []string{"proc/kcore", "proc/keys", "proc/timer_list", "proc/sched_debug", "proc/kallsyms"}
	maskedDirs  = []string{"proc/acpi", "proc/scsi", "sys/firmware"}
)

// seccompPolicy is the LXC seccomp policy of every guest: system calls
// that change the kernel itself (kexec, modules), reach files by handle
// past the mount namespace (open_by_handle_at), or expose kernel facilities
// shared by every guest (keyrings, bpf, perf, userfaultfd, swap, syslog,
// accounting, quotas, port I/O) fail. Keyring calls fail with ENOSYS,
// which programs take for "no keyrings" and carry on; the rest with
// EPERM. Mounting stays with what the user namespace allows (proc,
// tmpfs, sysfs of the guest's own network; never a disk), which systemd
// inside a guest needs.
const seccompPolicy = `2
denylist
reject_force_umount
[all]
kexec_load errno 1
kexec_file_load errno 1
open_by_handle_at errno 1
init_module errno 1
finit_module errno 1
delete_module errno 1
keyctl errno 38
add_key errno 38
request_key errno 38
bpf errno 1
perf_event_open errno 1
userfaultfd errno 1
swapon errno 1
swapoff errno 1
syslog errno 1
acct errno 1
quotactl errno 1
iopl errno 1
ioperm errno 1
lookup_dcookie errno 1
`

// seccompFile is where the driver keeps seccompPolicy, in its lxcpath
// (not a guest: guest names cannot start with a dot).
func (d *Driver) seccompFile() string { return filepath.Join(d.path, ".seccomp") }

// writeSeccomp writes the policy file, as this version of corpus has it.
func (d *Driver) writeSeccomp() error {
	if err := atomicfile.Write(d.seccompFile(), []byte(seccompPolicy), 0o644); err != nil {
		return fmt.Errorf("writing the guests' seccomp policy: %w", err)
	}
	return nil
}

// configureSecurity writes a guest's confinement (see above). m is the
// guest's id map; nil for a privileged guest.
func (d *Driver) configureSecurity(w *configWriter, m *idmap) {
	w.clear("lxc.include")
	w.clear("lxc.apparmor.profile")
	w.clear("lxc.apparmor.allow_nesting")
	if d.apparmor {
		w.set("lxc.apparmor.profile", "generated")
	}
	w.clear("lxc.cap.drop")
	w.clear("lxc.cap.keep")
	w.set("lxc.cap.drop", droppedCaps)
	w.clear("lxc.seccomp.profile")
	w.set("lxc.seccomp.profile", d.seccompFile())
	w.clear("lxc.mount.auto")
	w.set("lxc.mount.auto", "proc:mixed sys:mixed cgroup:mixed")
	w.set("lxc.autodev", "1")
	w.set("lxc.pty.max", "1024")
	for _, f := range maskedFiles {
		w.set("lxc.mount.entry", "/dev/null "+f+" none bind,ro,optional 0 0")
	}
	for _, dir := range maskedDirs {
		w.set("lxc.mount.entry", "tmpfs "+dir+" tmpfs ro,nosuid,nodev,noexec,size=0,optional 0 0")
	}
	setIDMap(w, m)
}

// setIDMap writes the guest's user namespace map: m, or none for a
// privileged guest (nil).
func setIDMap(w *configWriter, m *idmap) {
	w.clear("lxc.idmap")
	if m != nil {
		w.set("lxc.idmap", fmt.Sprintf("u 0 %d %d", m.UID, guestIDs))
		w.set("lxc.idmap", fmt.Sprintf("g 0 %d %d", m.GID, guestIDs))
	}
}

// configureDevices writes the device allow-list and the process cap with
// the keys of the host's cgroup version.
func (d *Driver) configureDevices(w *configWriter) {
	prefix := "lxc.cgroup."
	if d.cgroup == 2 {
		prefix = "lxc.cgroup2."
	}
	w.set(prefix+"devices.deny", "a")
	for _, dev := range allowedDevices {
		w.set(prefix+"devices.allow", dev)
	}
	w.set(prefix+"pids.max", fmt.Sprint(pidsMax))
}
