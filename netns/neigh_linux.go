package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// CorrectNeighbors makes this host's neighbour table agree with want on
// the bridge: an entry of one of want's addresses that names another MAC
// (a guest deleted and its address given to a new one within the
// table's reachable time, up to 45 s by default, with no gratuitous ARP
// from the new one) is set to the right MAC, stale, so the kernel
// confirms it. Until then every packet to the address went to the MAC
// gone. Entries of other addresses, and those already right or not
// there, are left alone. It returns the addresses corrected (none when
// the bridge does not exist).
func (h *Host) CorrectNeighbors(ctx context.Context, bridge string, want []Neighbor) ([]netip.Addr, error) {
	br, err := bridgeByName(bridge)
	if err != nil || br == nil {
		return nil, err // no bridge: no neighbours on it
	}
	have, err := retryDump(func() ([]netlink.Neigh, error) { return netlink.NeighList(br.Attrs().Index, unix.AF_INET) })
	if err != nil {
		return nil, fmt.Errorf("listing the neighbours of %s: %w", bridge, err)
	}
	macs := make(map[netip.Addr]net.HardwareAddr, len(want))
	for _, n := range want {
		macs[n.Addr] = n.MAC
	}
	var fixed []netip.Addr
	var errs []error
	for _, n := range have {
		addr, ok := netip.AddrFromSlice(n.IP.To4())
		mac, known := macs[addr]
		if !ok || !known || len(n.HardwareAddr) == 0 || bytes.Equal(n.HardwareAddr, mac) ||
			n.State&(unix.NUD_PERMANENT|unix.NUD_NOARP) != 0 {
			continue
		}
		set := netlink.Neigh{LinkIndex: br.Attrs().Index, Family: unix.AF_INET, State: unix.NUD_STALE, IP: n.IP, HardwareAddr: mac}
		if err := netlink.NeighSet(&set); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("neighbour %s: %w", addr, err))
			continue
		}
		h.log.Info("neighbour corrected", "bridge", bridge, "addr", addr.String(), "was", n.HardwareAddr.String(), "now", mac.String())
		fixed = append(fixed, addr)
	}
	return fixed, errors.Join(errs...)
}
