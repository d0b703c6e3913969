//go:build linux

package libvirt

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// plugTap puts the guest's tap device on bridge and brings it up. QEMU
// creates the tap in libvirtd's network namespace; when the agent (and
// its bridge) lives in another one, the tap is moved over first. QEMU
// keeps using the device through its open file, wherever it is.
func (d *Driver) plugTap(tap, bridge string) error {
	link, err := netlink.LinkByName(tap)
	if err != nil {
		if link, err = d.adoptTap(tap); err != nil {
			return err
		}
	}
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return fmt.Errorf("finding bridge %s: %w", bridge, err)
	}
	if link.Attrs().MasterIndex != br.Attrs().Index {
		if err := netlink.LinkSetMaster(link, br); err != nil {
			return fmt.Errorf("putting %s on bridge %s: %w", tap, bridge, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("bringing up %s: %w", tap, err)
	}
	return nil
}

// adoptTap moves tap from libvirtd's network namespace into this
// process's and returns it.
func (d *Driver) adoptTap(tap string) (netlink.Link, error) {
	pid, err := d.libvirtdPID()
	if err != nil {
		return nil, fmt.Errorf("finding tap %s: %w", tap, err)
	}
	theirs, err := netns.GetFromPid(pid)
	if err != nil {
		return nil, fmt.Errorf("finding tap %s: opening libvirtd's network namespace: %w", tap, err)
	}
	defer theirs.Close()
	ours, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("finding tap %s: %w", tap, err)
	}
	defer ours.Close()
	if theirs.Equal(ours) {
		return nil, fmt.Errorf("tap %s of the guest does not exist", tap)
	}
	h, err := netlink.NewHandleAt(theirs)
	if err != nil {
		return nil, fmt.Errorf("finding tap %s: %w", tap, err)
	}
	defer h.Close()
	link, err := h.LinkByName(tap)
	if err != nil {
		return nil, fmt.Errorf("finding tap %s in libvirtd's network namespace: %w", tap, err)
	}
	if err := h.LinkSetNsFd(link, int(ours)); err != nil {
		return nil, fmt.Errorf("moving tap %s into the agent's network namespace: %w", tap, err)
	}
	// The move is asynchronous to the new namespace's view; wait briefly.
	for range 50 {
		if link, err = netlink.LinkByName(tap); err == nil {
			return link, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, fmt.Errorf("tap %s did not arrive: %w", tap, err)
}

// libvirtdPID asks the kernel who listens on libvirtd's socket.
func (d *Driver) libvirtdPID() (int, error) {
	c, err := net.DialTimeout("unix", d.socket, 5*time.Second)
	if err != nil {
		return 0, fmt.Errorf("dialling libvirtd: %w", err)
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("reading libvirtd's credentials: %w", cerr)
	}
	if cred.Pid <= 0 {
		return 0, errors.New("libvirtd's pid is unknown")
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/ns/net", cred.Pid)); err != nil {
		return 0, fmt.Errorf("libvirtd's pid %d is not visible: %w", cred.Pid, err)
	}
	return int(cred.Pid), nil
}
