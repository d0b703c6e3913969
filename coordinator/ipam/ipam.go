// Package ipam hands out the cluster's guest network: a subnet of it to
// each node, an address of its node's subnet to each guest. It always
// picks the lowest free one, so every replica of the state machine picks
// the same.
package ipam

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrExhausted means an address range has no free entry left.
var ErrExhausted = errors.New("no free addresses left")

// ErrBadRange means a network or subnet that cannot be handed out from.
var ErrBadRange = errors.New("not a usable IPv4 range")

// NextSubnet returns the lowest /bits subnet of network that is not in
// taken (subnets, as "10.210.3.0/24").
func NextSubnet(network string, bits int, taken []string) (netip.Prefix, error) {
	nw, err := netip.ParsePrefix(network)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("cluster guest network %q: %w", network, ErrBadRange)
	}
	if bits <= nw.Bits() || bits > 30 || !nw.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("node subnet /%d in %s: %w", bits, nw, ErrBadRange)
	}
	used := map[netip.Prefix]bool{}
	for _, s := range taken {
		if p, err := netip.ParsePrefix(s); err == nil {
			used[p] = true
		}
	}
	size := uint32(1) << (32 - bits)
	count := uint32(1) << (bits - nw.Bits())
	base := addrToU32(nw.Masked().Addr())
	for i := uint32(0); i < count; i++ {
		p := netip.PrefixFrom(u32ToAddr(base+i*size), bits)
		if !used[p] {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("guest network %s has no free /%d for another node: %w", nw, bits, ErrExhausted)
}

// Gateway is the node's bridge address in its guest subnet: the first host.
func Gateway(subnet netip.Prefix) netip.Addr {
	return subnet.Masked().Addr().Next()
}

// NextAddress returns the lowest host address of subnet not in taken,
// skipping the network address, the gateway and the broadcast.
func NextAddress(subnet string, taken []string) (netip.Addr, error) {
	p, err := netip.ParsePrefix(subnet)
	if err != nil || !p.Addr().Is4() {
		return netip.Addr{}, fmt.Errorf("node guest subnet %q: %w", subnet, ErrBadRange)
	}
	used := map[netip.Addr]bool{}
	for _, s := range taken {
		if a, err := netip.ParseAddr(s); err == nil {
			used[a] = true
		}
	}
	last := u32ToAddr(addrToU32(p.Masked().Addr()) | (1<<(32-p.Bits()) - 1))
	for a := Gateway(p).Next(); a.IsValid() && a.Less(last); a = a.Next() {
		if !used[a] {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("node subnet %s: %w", p, ErrExhausted)
}

func addrToU32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func u32ToAddr(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
