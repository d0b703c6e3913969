package nat

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// DefaultPrefix starts the names of corpus's chains.
const DefaultPrefix = "CORPUS"

// maxPrefix keeps <prefix>-POSTROUTING within iptables' 28-byte chain
// names.
const maxPrefix = 28 - len("-POSTROUTING")

// Config configures a NAT.
type Config struct {
	// Prefix of corpus's chain names: uppercase letters, digits and '_',
	// starting with a letter, at most 16 bytes. Empty means DefaultPrefix.
	Prefix string
	// Logger receives one record per Apply or Remove that changed rules;
	// nil discards them.
	Logger *slog.Logger
}

// Validate returns nil or an error wrapping ErrInvalid.
func (c Config) Validate() error {
	p := c.Prefix
	if p == "" {
		return nil
	}
	if len(p) > maxPrefix {
		return fmt.Errorf("%w: chain prefix %q is longer than %d bytes", ErrInvalid, p, maxPrefix)
	}
	for i, r := range p {
		if r >= 'A' && r <= 'Z' || i > 0 && (r >= '0' && r <= '9' || r == '_') {
			continue
		}
		return fmt.Errorf("%w: chain prefix %q: use uppercase letters, digits and '_', starting with a letter", ErrInvalid, p)
	}
	return nil
}

// Desired is the NAT a node should have.
type Desired struct {
	// Subnets are the guest subnets (network addresses, e.g.
	// 10.210.3.0/24) masqueraded when they leave the node.
	Subnets []netip.Prefix
	// Bridge is the interface the guests hang off; required when Subnets
	// or Forwards are set.
	Bridge string
	// Forwards are the published ports.
	Forwards []Forward

	// Guests on the bridge are kept apart (br_netfilter hands bridged
	// frames to iptables; the agent makes sure it does). The rules name
	// guests by source address, which each guest cannot forge: package
	// l2filter drops, at its bridge port and before these rules, IPv4
	// a guest sends from another address.
	//
	// Groups are sets of guest addresses that may reach each other
	// across the bridge (a project's guests). A guest in no group with
	// another reaches other guests only through published ports.
	Groups [][]netip.Addr
	// NodePorts are the node's own ports guests may reach on it (its
	// resolver, its proxy); everything else they send to the node is
	// dropped.
	NodePorts []NodePort
	// Blocked are TCP endpoints elsewhere that guests may not reach (the
	// control plane's).
	Blocked []netip.AddrPort
	// Sealed are guests (a service's) that nothing reaches but the
	// addresses each names, on its TCP port: not other guests of the
	// bridge, other nodes, or the outside.
	Sealed []Sealed
	// Peers are other nodes' guest subnets, routed to them: guests'
	// traffic to them keeps its source address (no masquerade), so the
	// rules there know who sends; their guests reach this node's guests
	// only where Sealed names them, and through published ports.
	Peers []netip.Prefix
}

// Sealed is a guest only some addresses may reach, on one TCP port.
type Sealed struct {
	Addr netip.Addr
	Port int
	// From are the addresses that may connect.
	From []netip.Addr
}

// NodePort is a port of the node that its guests may reach.
type NodePort struct {
	Proto string // "tcp" or "udp"
	Port  int
}

// Forward publishes a guest port on the node.
type Forward struct {
	Proto    string     // "tcp" or "udp"
	HostPort int        // 1–65535
	HostAddr netip.Addr // only this node address; the zero Addr means every local address
	// GuestAddr must lie in one of Desired.Subnets.
	GuestAddr netip.Addr
	GuestPort int // 1–65535
}

func (f Forward) String() string {
	host := "*"
	if !anyAddr(f.HostAddr) {
		host = f.HostAddr.String()
	}
	return f.Proto + "/" + host + ":" + strconv.Itoa(f.HostPort) + "->" + f.GuestAddr.String() + ":" + strconv.Itoa(f.GuestPort)
}

func anyAddr(a netip.Addr) bool { return !a.IsValid() || a.IsUnspecified() }

// Validate returns nil, an error wrapping ErrInvalid, or one wrapping
// ErrConflict when two forwards claim the same host port (the same
// protocol and port on the same address, or on every address and one).
func (d Desired) Validate() error {
	if (len(d.Subnets) > 0 || len(d.Forwards) > 0 || len(d.Groups) > 0 || len(d.NodePorts) > 0 || len(d.Blocked) > 0 || len(d.Sealed) > 0) && d.Bridge == "" {
		return fmt.Errorf("%w: a bridge is required with subnets, forwards, groups, node ports, blocked endpoints or sealed guests", ErrInvalid)
	}
	if d.Bridge != "" {
		if err := validIfName(d.Bridge); err != nil {
			return err
		}
	}
	for i, s := range d.Subnets {
		switch {
		case !s.IsValid() || !s.Addr().Is4():
			return fmt.Errorf("%w: subnet %v is not an IPv4 prefix", ErrInvalid, s)
		case s != s.Masked():
			return fmt.Errorf("%w: subnet %v has host bits set; did you mean %v?", ErrInvalid, s, s.Masked())
		case slices.Contains(d.Subnets[:i], s):
			return fmt.Errorf("%w: subnet %v is listed twice", ErrInvalid, s)
		}
	}
	for _, p := range d.Peers {
		if !p.IsValid() || !p.Addr().Is4() || p != p.Masked() {
			return fmt.Errorf("%w: peer subnet %v is not an IPv4 network prefix", ErrInvalid, p)
		}
	}
	for _, np := range d.NodePorts {
		if np.Proto != "tcp" && np.Proto != "udp" || np.Port < 1 || np.Port > 65535 {
			return fmt.Errorf("%w: node port %s/%d: want tcp or udp and a port from 1 to 65535", ErrInvalid, np.Proto, np.Port)
		}
	}
	for _, ap := range d.Blocked {
		if !ap.Addr().Is4() || ap.Port() == 0 {
			return fmt.Errorf("%w: blocked endpoint %v: want an IPv4 address and a port", ErrInvalid, ap)
		}
	}
	for _, g := range d.Groups {
		for _, a := range g {
			if !slices.ContainsFunc(d.Subnets, func(s netip.Prefix) bool { return s.Contains(a) }) {
				return fmt.Errorf("%w: group member %v is in none of the subnets %v", ErrInvalid, a, d.Subnets)
			}
		}
	}
	for _, sg := range d.Sealed {
		if !slices.ContainsFunc(d.Subnets, func(s netip.Prefix) bool { return s.Contains(sg.Addr) }) {
			return fmt.Errorf("%w: sealed guest %v is in none of the subnets %v", ErrInvalid, sg.Addr, d.Subnets)
		}
		if sg.Port < 1 || sg.Port > 65535 {
			return fmt.Errorf("%w: sealed guest %v: port %d is not 1 to 65535", ErrInvalid, sg.Addr, sg.Port)
		}
		for _, a := range sg.From {
			if !a.Is4() {
				return fmt.Errorf("%w: sealed guest %v: %v is not IPv4", ErrInvalid, sg.Addr, a)
			}
		}
	}
	type key struct {
		proto string
		port  int
	}
	type addrKey struct {
		key
		addr netip.Addr
	}
	// A port claimed on every address, or on some single ones.
	onAll := make(map[key]bool, len(d.Forwards))
	onSome := map[key]bool{}
	onOne := map[addrKey]bool{}
	for _, f := range d.Forwards {
		if err := f.validate(d.Subnets); err != nil {
			return err
		}
		k := key{f.Proto, f.HostPort}
		taken := onAll[k]
		if anyAddr(f.HostAddr) {
			taken = taken || onSome[k]
			onAll[k] = true
		} else {
			ak := addrKey{k, f.HostAddr}
			taken = taken || onOne[ak]
			onOne[ak], onSome[k] = true, true
		}
		if taken {
			return fmt.Errorf("%w: forward %v and another forward both claim %s port %d", ErrConflict, f, f.Proto, f.HostPort)
		}
	}
	return nil
}

func (f Forward) validate(subnets []netip.Prefix) error {
	switch {
	case f.Proto != "tcp" && f.Proto != "udp":
		return fmt.Errorf("%w: forward %v: protocol must be tcp or udp", ErrInvalid, f)
	case f.HostPort < 1 || f.HostPort > 65535:
		return fmt.Errorf("%w: forward %v: host port must be 1 to 65535", ErrInvalid, f)
	case f.GuestPort < 1 || f.GuestPort > 65535:
		return fmt.Errorf("%w: forward %v: guest port must be 1 to 65535", ErrInvalid, f)
	case f.HostAddr.IsValid() && !f.HostAddr.Is4():
		return fmt.Errorf("%w: forward %v: host address must be IPv4", ErrInvalid, f)
	case !f.GuestAddr.IsValid() || !f.GuestAddr.Is4():
		return fmt.Errorf("%w: forward %v: guest address must be IPv4", ErrInvalid, f)
	case !slices.ContainsFunc(subnets, func(s netip.Prefix) bool { return s.Contains(f.GuestAddr) }):
		return fmt.Errorf("%w: forward %v: guest address is in none of the subnets %v", ErrInvalid, f, subnets)
	}
	return nil
}

// validIfName follows the kernel's dev_valid_name.
func validIfName(name string) error {
	if name == "" || len(name) > 15 || name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n\r\x00\"\\") {
		return fmt.Errorf("%w: bridge name %q is not a valid interface name", ErrInvalid, name)
	}
	return nil
}

// compareForwards orders forwards for stable rule order.
func compareForwards(a, b Forward) int {
	return cmp.Or(
		strings.Compare(a.Proto, b.Proto),
		cmp.Compare(a.HostPort, b.HostPort),
		a.HostAddr.Compare(b.HostAddr),
	)
}
