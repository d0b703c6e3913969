package state

import (
	"errors"
	"fmt"
	"net/netip"

	corpusv1 "corpus/proto/corpus/v1"
)

// Network defaults, set in the cluster config at bootstrap.
const (
	DefaultGuestNetwork   = "10.210.0.0/16"
	DefaultNodeSubnetBits = 24
)

// ErrExhausted means an address range has no free entry left.
var ErrExhausted = errors.New("no free addresses left")

// ErrPortTaken means a node port is already published or reserved.
var ErrPortTaken = errors.New("port is already in use")

// nextNodeSubnet returns the lowest subnet of the cluster's guest network
// that no node holds. Deterministic, so every replica picks the same.
// A cluster config without a guest network uses the defaults.
func nextNodeSubnet(cfg *corpusv1.ClusterConfig, nodes []*corpusv1.Node) (netip.Prefix, error) {
	network, bits := DefaultGuestNetwork, DefaultNodeSubnetBits
	if cfg.GetGuestNetwork() != "" {
		network, bits = cfg.GetGuestNetwork(), int(cfg.GetNodeSubnetBits())
	}
	return nextSubnet(network, bits, nodes)
}

func nextSubnet(networkStr string, bits int, nodes []*corpusv1.Node) (netip.Prefix, error) {
	network, err := netip.ParsePrefix(networkStr)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("cluster guest network %q: %w", networkStr, ErrInvalid)
	}
	if bits <= network.Bits() || bits > 30 || !network.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("node subnet /%d in %s: %w", bits, network, ErrInvalid)
	}
	used := map[netip.Prefix]bool{}
	for _, n := range nodes {
		if p, err := netip.ParsePrefix(n.GuestSubnet); err == nil {
			used[p] = true
		}
	}
	size := uint32(1) << (32 - bits)
	count := uint32(1) << (bits - network.Bits())
	base := addrToU32(network.Masked().Addr())
	for i := uint32(0); i < count; i++ {
		p := netip.PrefixFrom(u32ToAddr(base+i*size), bits)
		if !used[p] {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("guest network %s has no free /%d for another node: %w", network, bits, ErrExhausted)
}

// Gateway is the node's bridge address in its guest subnet: the first host.
func Gateway(subnet netip.Prefix) netip.Addr {
	return subnet.Masked().Addr().Next()
}

// nextGuestAddress returns the lowest free host address of a node's
// subnet that is not taken, skipping the network address, the gateway and the broadcast.
func nextGuestAddress(subnet string, taken []string) (netip.Addr, error) {
	p, err := netip.ParsePrefix(subnet)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("node has no guest subnet: %w", ErrInvalid)
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
