package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"corpus/internal/revert"
)

// bridgeFilterPath is br_netfilter's switch that hands bridged IPv4
// frames to iptables: guests on one bridge are kept apart by the filter
// rules of package nat only with it on. Per network namespace.
const bridgeFilterPath = "/proc/sys/net/bridge/bridge-nf-call-iptables"

// ensureBridgeFiltering turns bridge-nf-call-iptables on, loading
// br_netfilter when the kernel has not yet.
func ensureBridgeFiltering(ch *BridgeChanges) error {
	b, err := os.ReadFile(bridgeFilterPath)
	if errors.Is(err, fs.ErrNotExist) {
		if out, merr := exec.Command("modprobe", "br_netfilter").CombinedOutput(); merr != nil {
			return fmt.Errorf("guests on a bridge are kept apart by iptables, which needs br_netfilter: modprobe br_netfilter: %v: %s", merr, bytes.TrimSpace(out))
		}
		b, err = os.ReadFile(bridgeFilterPath)
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", bridgeFilterPath, err)
	}
	if bytes.Equal(bytes.TrimSpace(b), []byte("1")) {
		return nil
	}
	if err := os.WriteFile(bridgeFilterPath, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("turning bridge filtering on: %w", err)
	}
	ch.BridgeFiltering = true
	return nil
}

// forwardingPath is the IPv4 forwarding switch. /proc/sys/net resolves to
// the network namespace of the thread that opens it.
const forwardingPath = "/proc/sys/net/ipv4/ip_forward"

// EnsureBridge makes the bridge b.Name exist, be up, carry b.Gateway, have
// b.MTU (when set) and hairpin mode on every port, and turns IPv4
// forwarding and bridge filtering (bridge-nf-call-iptables) on. Addresses on the bridge that overlap the guest subnet and
// are not the gateway are removed; other addresses are left alone.
//
// It changes only what differs and says what in the returned BridgeChanges;
// on a host that is already right it changes nothing. When it created the
// bridge and a later step fails, it deletes the bridge again. A link named
// b.Name that is not a bridge is left alone and ErrNotBridge returned.
//
// Hairpin mode matters when br_netfilter hands bridged frames to iptables
// (bridge-nf-call-iptables=1): a guest reaching its own published port is
// then DNATed at the bridge, and the frame must leave through the port it
// came in by.
func (h *Host) EnsureBridge(ctx context.Context, b Bridge) (BridgeChanges, error) {
	var ch BridgeChanges
	if err := ctx.Err(); err != nil {
		return ch, err
	}
	if err := b.Validate(); err != nil {
		return ch, err
	}
	r := revert.New()
	defer r.Fail()

	link, err := bridgeByName(b.Name)
	if err != nil {
		return ch, err
	}
	if link == nil {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = b.Name
		attrs.MTU = b.MTU
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil {
			return ch, fmt.Errorf("creating bridge %s: %w", b.Name, err)
		}
		r.Add(func() { h.undo("deleting bridge", b.Name, h.DeleteBridge(ctx, b.Name)) })
		ch.Created = true
		if link, err = bridgeByName(b.Name); err != nil {
			return ch, err
		}
		if link == nil {
			return ch, fmt.Errorf("creating bridge %s: gone right after creation", b.Name)
		}
	}

	if b.MTU != 0 && link.Attrs().MTU != b.MTU {
		if err := netlink.LinkSetMTU(link, b.MTU); err != nil {
			return ch, fmt.Errorf("setting MTU of bridge %s: %w", b.Name, err)
		}
		ch.SetMTU = !ch.Created
	}

	if err := ensureGateway(link, b, &ch); err != nil {
		return ch, err
	}

	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(link); err != nil {
			return ch, fmt.Errorf("setting bridge %s up: %w", b.Name, err)
		}
		ch.SetUp = !ch.Created
	}

	ports, err := bridgePorts(link)
	if err != nil {
		return ch, err
	}
	for _, p := range ports {
		if p.Hairpin {
			continue
		}
		if err := setHairpin(p.Name); err != nil {
			return ch, err
		}
		ch.HairpinPorts = append(ch.HairpinPorts, p.Name)
	}

	if err := ensureBridgeFiltering(&ch); err != nil {
		return ch, err
	}

	on, err := forwarding()
	if err != nil {
		return ch, err
	}
	if !on {
		if err := os.WriteFile(forwardingPath, []byte("1\n"), 0o644); err != nil {
			return ch, fmt.Errorf("enabling IPv4 forwarding: %w", err)
		}
		ch.Forwarding = true
	}

	r.Success()
	if ch.Changed() {
		h.log.Info("bridge changed", "bridge", b.Name, "created", ch.Created, "set_mtu", ch.SetMTU,
			"added_addrs", ch.AddedAddrs, "removed_addrs", ch.RemovedAddrs, "set_up", ch.SetUp,
			"hairpin_ports", ch.HairpinPorts, "enabled_forwarding", ch.Forwarding)
	}
	return ch, nil
}

// ensureGateway removes the bridge's addresses that overlap the guest
// subnet but are not the gateway, then adds the gateway if it is missing.
// Removing first keeps a stale primary address in the subnet from taking
// the gateway down with it as a secondary.
func ensureGateway(link netlink.Link, b Bridge, ch *BridgeChanges) error {
	addrs, err := addrList(link)
	if err != nil {
		return fmt.Errorf("listing addresses of bridge %s: %w", b.Name, err)
	}
	subnet := b.Subnet()
	have := false
	for _, a := range addrs {
		p, ok := prefixOf(a.IPNet)
		if !ok {
			continue
		}
		if p == b.Gateway {
			have = true
			continue
		}
		if !p.Overlaps(subnet) {
			continue
		}
		if err := netlink.AddrDel(link, &a); err != nil && !errors.Is(err, errNoAddr) {
			return fmt.Errorf("removing address %v from bridge %s: %w", p, b.Name, err)
		}
		ch.RemovedAddrs = append(ch.RemovedAddrs, p)
	}
	if len(ch.RemovedAddrs) > 0 && have {
		// The gateway may have been a secondary of a removed address.
		if addrs, err = addrList(link); err != nil {
			return fmt.Errorf("listing addresses of bridge %s: %w", b.Name, err)
		}
		have = slices.ContainsFunc(addrs, func(a netlink.Addr) bool {
			p, ok := prefixOf(a.IPNet)
			return ok && p == b.Gateway
		})
	}
	if have {
		return nil
	}
	addr := &netlink.Addr{IPNet: ipNet(b.Gateway)}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("adding address %v to bridge %s: %w", b.Gateway, b.Name, err)
	}
	ch.AddedAddrs = append(ch.AddedAddrs, b.Gateway)
	return nil
}

// DeleteBridge deletes the bridge name; ports attached to it are detached,
// not deleted. A missing bridge is not an error, so DeleteBridge can be an
// undo hook. A link of that name that is not a bridge is left alone and
// ErrNotBridge returned.
func (h *Host) DeleteBridge(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validIfName(name); err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	link, err := bridgeByName(name)
	if err != nil || link == nil {
		return err
	}
	if err := netlink.LinkDel(link); err != nil {
		if isNotFound(err) {
			return nil
		}
		return fmt.Errorf("deleting bridge %s: %w", name, err)
	}
	h.log.Info("bridge deleted", "bridge", name)
	return nil
}

// BridgeStatus observes the bridge name. A missing bridge is reported with
// Exists false and no error; a link of that name that is not a bridge
// returns ErrNotBridge. The caller owns the result.
func (h *Host) BridgeStatus(ctx context.Context, name string) (BridgeState, error) {
	st := BridgeState{Name: name}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	if err := validIfName(name); err != nil {
		return st, fmt.Errorf("bridge: %w", err)
	}
	var err error
	if st.Forwarding, err = forwarding(); err != nil {
		return st, err
	}
	link, err := bridgeByName(name)
	if err != nil || link == nil {
		return st, err
	}
	st.Exists = true
	st.Up = link.Attrs().Flags&net.FlagUp != 0
	st.MTU = link.Attrs().MTU
	addrs, err := addrList(link)
	if err != nil {
		return st, fmt.Errorf("listing addresses of bridge %s: %w", name, err)
	}
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok {
			st.Addrs = append(st.Addrs, p)
		}
	}
	if st.Ports, err = bridgePorts(link); err != nil {
		return st, err
	}
	return st, nil
}

// bridgeByName returns the bridge, nil when no link has that name, or
// ErrNotBridge.
func bridgeByName(name string) (netlink.Link, error) {
	link, err := netlink.LinkByName(name)
	if err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("looking up bridge %s: %w", name, err)
	}
	if link.Type() != "bridge" {
		return nil, fmt.Errorf("%w: %s is a %s", ErrNotBridge, name, link.Type())
	}
	return link, nil
}

// bridgePorts lists the links attached to br with their hairpin mode,
// sorted by name.
func bridgePorts(br netlink.Link) ([]Port, error) {
	links, err := retryDump(netlink.LinkList)
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	var ports []Port
	for _, l := range links {
		if l.Attrs().MasterIndex != br.Attrs().Index {
			continue
		}
		pi, err := retryDump(func() (netlink.Protinfo, error) { return netlink.LinkGetProtinfo(l) })
		if err != nil {
			if _, lerr := netlink.LinkByIndex(l.Attrs().Index); isNotFound(lerr) {
				continue // deleted since the listing
			}
			return nil, fmt.Errorf("reading bridge port %s: %w", l.Attrs().Name, err)
		}
		ports = append(ports, Port{
			Name:    l.Attrs().Name,
			Up:      l.Attrs().Flags&net.FlagUp != 0,
			Hairpin: pi.Hairpin,
		})
	}
	slices.SortFunc(ports, func(a, b Port) int { return strings.Compare(a.Name, b.Name) })
	return ports, nil
}

func setHairpin(port string) error {
	link, err := netlink.LinkByName(port)
	if err != nil {
		return fmt.Errorf("looking up bridge port %s: %w", port, err)
	}
	if err := netlink.LinkSetHairpin(link, true); err != nil {
		return fmt.Errorf("setting hairpin mode on %s: %w", port, err)
	}
	return nil
}

func forwarding() (bool, error) {
	v, err := os.ReadFile(forwardingPath)
	if err != nil {
		return false, fmt.Errorf("reading IPv4 forwarding: %w", err)
	}
	return strings.TrimSpace(string(v)) == "1", nil
}

func addrList(link netlink.Link) ([]netlink.Addr, error) {
	return retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(link, netlink.FAMILY_V4) })
}

// retryDump repeats a netlink dump the kernel interrupted because the
// table changed under it.
func retryDump[T any](dump func() (T, error)) (T, error) {
	var v T
	var err error
	for range 5 {
		v, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}

// errNoAddr is what the kernel answers when the address is already gone.
const errNoAddr = unix.EADDRNOTAVAIL

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	ip, ok := netip.AddrFromSlice(n.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if bits != 32 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(ip, ones), true
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), 32)}
}

func (h *Host) undo(what, name string, err error) {
	if err != nil {
		h.log.Warn("undo failed", "op", what, "link", name, "err", err)
	}
}
