package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the routes corpus owns in the main table (the
// rtm_protocol field, as routing daemons mark theirs): EnsureRoutes adds
// and removes only routes with it.
const RouteProtocol netlink.RouteProtocol = 0xc7

// EnsureRoutes makes corpus's routes in the main table exactly want: a
// missing or changed one is replaced, one no longer wanted is deleted,
// routes of anyone else are left alone. A gateway that is not on a link
// of this host is reached through the route to it (the node's own
// gateway). It returns whether anything changed; a route that cannot be
// set is reported and the others are still made.
func (h *Host) EnsureRoutes(ctx context.Context, want []Route) (bool, error) {
	have, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, fmt.Errorf("listing routes: %w", err)
	}
	// The next hop of each wanted prefix.
	wanted := map[netip.Prefix]netip.Addr{}
	for _, r := range want {
		wanted[r.Dst.Masked()] = viaGateway(r.Via)
	}
	changed := false
	var errs []error
	for _, r := range have {
		if r.Dst == nil {
			continue
		}
		dst, ok := netip.AddrFromSlice(r.Dst.IP.To4())
		ones, _ := r.Dst.Mask.Size()
		if !ok {
			continue
		}
		p := netip.PrefixFrom(dst, ones)
		if next, keep := wanted[p]; keep && gatewayOf(r) == next {
			delete(wanted, p)
			continue
		}
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("deleting route %s: %w", p, err))
			continue
		}
		changed = true
		h.log.Info("route removed", "dst", p.String())
	}
	prefixes := make([]netip.Prefix, 0, len(wanted))
	for p := range wanted {
		prefixes = append(prefixes, p)
	}
	slices.SortFunc(prefixes, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	for _, p := range prefixes {
		via := wanted[p]
		r := &netlink.Route{
			Dst:      &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)},
			Gw:       via.AsSlice(),
			Protocol: RouteProtocol,
			Table:    unix.RT_TABLE_MAIN,
		}
		if err := netlink.RouteReplace(r); err != nil {
			errs = append(errs, fmt.Errorf("route %s via %s: %w", p, via, err))
			continue
		}
		changed = true
		h.log.Info("route set", "dst", p.String(), "via", via.String())
	}
	return changed, errors.Join(errs...)
}

// viaGateway is the next hop towards addr: addr itself when it is on a
// link of this host, else the gateway of the route to it.
func viaGateway(addr netip.Addr) netip.Addr {
	rs, err := netlink.RouteGet(addr.AsSlice())
	if err != nil || len(rs) == 0 || rs[0].Gw == nil {
		return addr
	}
	if gw, ok := netip.AddrFromSlice(rs[0].Gw.To4()); ok {
		return gw
	}
	return addr
}

func gatewayOf(r netlink.Route) netip.Addr {
	a, _ := netip.AddrFromSlice(r.Gw.To4())
	return a
}
