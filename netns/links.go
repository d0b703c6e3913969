package netns

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
)

// Config configures a Host.
type Config struct {
	// Logger receives one record per change made to the host; nil
	// discards them.
	Logger *slog.Logger
}

// Host programs links and addresses in the calling thread's network
// namespace. It holds no state of its own; its methods are safe for
// concurrent use.
type Host struct {
	log *slog.Logger
}

// New returns a Host.
func New(cfg Config) *Host {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Host{log: log.With("component", "netns")}
}

// Bridge is the bridge corpus wants on a node.
type Bridge struct {
	// Name is the interface name, at most 15 bytes.
	Name string
	// Gateway is the bridge's address with the guest subnet's length, e.g.
	// 10.210.3.1/24. Guests use its address as their default gateway.
	Gateway netip.Prefix
	// MTU of the bridge; 0 leaves the kernel's choice.
	MTU int
}

// Validate returns nil or an error wrapping ErrInvalid.
func (b Bridge) Validate() error {
	if err := validIfName(b.Name); err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	g := b.Gateway
	switch {
	case !g.IsValid() || !g.Addr().Is4():
		return fmt.Errorf("%w: bridge %s gateway %v is not an IPv4 prefix", ErrInvalid, b.Name, g)
	case g.Bits() < 1 || g.Bits() > 30:
		return fmt.Errorf("%w: bridge %s gateway %v: prefix length must be 1 to 30", ErrInvalid, b.Name, g)
	case g.Addr() == g.Masked().Addr() || g.Addr() == lastAddr(g):
		return fmt.Errorf("%w: bridge %s gateway %v is the network or broadcast address", ErrInvalid, b.Name, g)
	}
	if err := validMTU(b.MTU); err != nil {
		return fmt.Errorf("bridge %s: %w", b.Name, err)
	}
	return nil
}

// Subnet returns the guest subnet the bridge serves, e.g. 10.210.3.0/24.
func (b Bridge) Subnet() netip.Prefix { return b.Gateway.Masked() }

// BridgeChanges says what EnsureBridge changed. The zero value means the
// host already matched.
type BridgeChanges struct {
	Created      bool           // the bridge did not exist
	SetMTU       bool           // its MTU differed
	AddedAddrs   []netip.Prefix // the gateway, when it was missing
	RemovedAddrs []netip.Prefix // addresses overlapping the guest subnet that were not the gateway
	SetUp        bool           // it was down
	HairpinPorts []string       // ports whose hairpin mode was turned on
	Forwarding   bool           // IPv4 forwarding was off
	// BridgeFiltering: bridge-nf-call-iptables was off.
	BridgeFiltering bool
}

// Changed reports whether EnsureBridge changed anything.
func (c BridgeChanges) Changed() bool {
	return c.Created || c.SetMTU || len(c.AddedAddrs) > 0 || len(c.RemovedAddrs) > 0 ||
		c.SetUp || len(c.HairpinPorts) > 0 || c.Forwarding || c.BridgeFiltering
}

// BridgeState is what BridgeStatus observed. The caller owns it.
type BridgeState struct {
	Name       string
	Exists     bool
	Up         bool
	MTU        int
	Addrs      []netip.Prefix // IPv4 addresses
	Ports      []Port         // links attached to the bridge, by name
	Forwarding bool           // IPv4 forwarding in this namespace
}

// Port is one link attached to a bridge.
type Port struct {
	Name    string
	Up      bool
	Hairpin bool
}

// Veth is a veth pair joining a guest to a bridge.
type Veth struct {
	// Name is the node's end, attached to Bridge.
	Name string
	// Peer is the guest's end.
	Peer string
	// Bridge to attach Name to; it must exist.
	Bridge string
	// MTU of both ends; 0 takes the bridge's.
	MTU int
	// PeerNS is the path of a network namespace file (/proc/PID/ns/net,
	// /run/netns/NAME) the peer is created in; empty keeps it beside Name.
	PeerNS string
}

// Validate returns nil or an error wrapping ErrInvalid.
func (v Veth) Validate() error {
	for _, n := range []string{v.Name, v.Peer, v.Bridge} {
		if err := validIfName(n); err != nil {
			return fmt.Errorf("veth: %w", err)
		}
	}
	if v.Name == v.Peer && v.PeerNS == "" {
		return fmt.Errorf("%w: veth %s: both ends have the same name", ErrInvalid, v.Name)
	}
	if err := validMTU(v.MTU); err != nil {
		return fmt.Errorf("veth %s: %w", v.Name, err)
	}
	return nil
}

// validIfName follows the kernel's dev_valid_name.
func validIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: interface name is empty", ErrInvalid)
	case len(name) > 15:
		return fmt.Errorf("%w: interface name %q is longer than 15 bytes", ErrInvalid, name)
	case name == "." || name == "..":
		return fmt.Errorf("%w: interface name %q", ErrInvalid, name)
	case strings.ContainsAny(name, "/: \t\n\r\x00"):
		return fmt.Errorf("%w: interface name %q contains '/', ':' or whitespace", ErrInvalid, name)
	}
	return nil
}

func validMTU(mtu int) error {
	if mtu != 0 && (mtu < 68 || mtu > 65535) {
		return fmt.Errorf("%w: MTU %d is outside 68 to 65535", ErrInvalid, mtu)
	}
	return nil
}

// lastAddr returns the broadcast address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Neighbor is an address on a bridge and the MAC that holds it.
type Neighbor struct {
	Addr netip.Addr
	MAC  net.HardwareAddr
}
