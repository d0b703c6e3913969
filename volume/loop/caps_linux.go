package loop

import "golang.org/x/sys/unix"

// canResizeOnline reports whether this process may grow a mounted ext4
// file system: the kernel's online resize (EXT4_IOC_RESIZE_FS) demands
// CAP_SYS_RESOURCE in the initial user namespace, which containers and
// sandboxes often drop even for root.
func canResizeOnline() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	const bit = unix.CAP_SYS_RESOURCE
	return data[bit/32].Effective&(1<<(bit%32)) != 0
}
