package netns

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/vishvananda/netlink"

	"corpus/internal/revert"
)

// EnsureVeth makes the veth pair v exist with v.Name attached to v.Bridge,
// up, with hairpin mode on, and reports whether it created the pair. A new
// pair's peer is created directly in v.PeerNS (when set) and left down for
// the guest side to configure. When v.Name already exists only the node's
// end is checked and repaired; the peer is not looked for, as it may live
// in a namespace this call cannot see.
//
// It returns ErrNoBridge when the bridge is missing, ErrNotVeth when v.Name
// is another kind of link. When it created the pair and a later step fails,
// it deletes the pair again.
func (h *Host) EnsureVeth(ctx context.Context, v Veth) (created bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := v.Validate(); err != nil {
		return false, err
	}
	br, err := bridgeByName(v.Bridge)
	if err != nil {
		return false, err
	}
	if br == nil {
		return false, fmt.Errorf("attaching veth %s: %w: %s", v.Name, ErrNoBridge, v.Bridge)
	}
	r := revert.New()
	defer r.Fail()

	link, err := netlink.LinkByName(v.Name)
	switch {
	case isNotFound(err):
		if err := h.addVeth(v, br); err != nil {
			return false, err
		}
		r.Add(func() { h.undo("deleting veth", v.Name, h.DeleteLink(ctx, v.Name)) })
		created = true
		if link, err = netlink.LinkByName(v.Name); err != nil {
			return false, fmt.Errorf("looking up veth %s: %w", v.Name, err)
		}
	case err != nil:
		return false, fmt.Errorf("looking up veth %s: %w", v.Name, err)
	case link.Type() != "veth":
		return false, fmt.Errorf("%w: %s is a %s", ErrNotVeth, v.Name, link.Type())
	}

	repaired, err := ensurePort(link, br)
	if err != nil {
		return false, err // a pair made here is deleted again
	}
	r.Success()
	switch {
	case created:
		h.log.Info("veth created", "veth", v.Name, "peer", v.Peer, "bridge", v.Bridge)
	case len(repaired) > 0:
		h.log.Info("veth repaired", "veth", v.Name, "bridge", v.Bridge, "fixed", repaired)
	}
	return created, nil
}

// EnsurePort makes the existing link name (a veth or tap made by a
// driver, such as LXC or libvirt) a port of bridge, up, with hairpin mode
// on, and reports whether it changed anything. It returns ErrNoBridge when
// the bridge is missing and ErrNoLink when the link is.
func (h *Host) EnsurePort(ctx context.Context, bridge, name string) (changed bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	for _, n := range []string{bridge, name} {
		if err := validIfName(n); err != nil {
			return false, fmt.Errorf("port: %w", err)
		}
	}
	br, err := bridgeByName(bridge)
	if err != nil {
		return false, err
	}
	if br == nil {
		return false, fmt.Errorf("attaching %s: %w: %s", name, ErrNoBridge, bridge)
	}
	link, err := netlink.LinkByName(name)
	if isNotFound(err) {
		return false, fmt.Errorf("attaching %s to %s: %w", name, bridge, ErrNoLink)
	}
	if err != nil {
		return false, fmt.Errorf("looking up %s: %w", name, err)
	}
	repaired, err := ensurePort(link, br)
	if err != nil {
		return false, err
	}
	if len(repaired) > 0 {
		h.log.Info("bridge port repaired", "port", name, "bridge", bridge, "fixed", repaired)
	}
	return len(repaired) > 0, nil
}

// ensurePort attaches link to br, turns hairpin mode on and sets it up,
// and names what it had to fix.
func ensurePort(link, br netlink.Link) ([]string, error) {
	name := link.Attrs().Name
	var repaired []string
	if link.Attrs().MasterIndex != br.Attrs().Index {
		if err := netlink.LinkSetMaster(link, br); err != nil {
			return repaired, fmt.Errorf("attaching %s to bridge %s: %w", name, br.Attrs().Name, err)
		}
		repaired = append(repaired, "master")
	}
	pi, err := retryDump(func() (netlink.Protinfo, error) { return netlink.LinkGetProtinfo(link) })
	if err != nil {
		return repaired, fmt.Errorf("reading bridge port %s: %w", name, err)
	}
	if !pi.Hairpin {
		if err := netlink.LinkSetHairpin(link, true); err != nil {
			return repaired, fmt.Errorf("setting hairpin mode on %s: %w", name, err)
		}
		repaired = append(repaired, "hairpin")
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(link); err != nil {
			return repaired, fmt.Errorf("setting %s up: %w", name, err)
		}
		repaired = append(repaired, "up")
	}
	return repaired, nil
}

func (h *Host) addVeth(v Veth, br netlink.Link) error {
	attrs := netlink.NewLinkAttrs()
	attrs.Name = v.Name
	attrs.MTU = v.MTU
	if attrs.MTU == 0 {
		attrs.MTU = br.Attrs().MTU
	}
	attrs.MasterIndex = br.Attrs().Index
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: v.Peer}
	if v.PeerNS != "" {
		f, err := os.Open(v.PeerNS)
		if err != nil {
			return fmt.Errorf("opening namespace for veth %s: %w", v.Peer, err)
		}
		defer f.Close()
		veth.PeerNamespace = netlink.NsFd(f.Fd())
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("creating veth %s: %w", v.Name, err)
	}
	return nil
}

// DeleteLink deletes the link name (for a veth, both ends). A missing link
// is not an error, so DeleteLink can be an undo hook.
func (h *Host) DeleteLink(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validIfName(name); err != nil {
		return err
	}
	link, err := netlink.LinkByName(name)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up link %s: %w", name, err)
	}
	if err := netlink.LinkDel(link); err != nil && !isNotFound(err) {
		return fmt.Errorf("deleting link %s: %w", name, err)
	}
	h.log.Info("link deleted", "link", name)
	return nil
}
