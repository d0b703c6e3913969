package netns_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"corpus/internal/revert"
	"corpus/netns"
	"corpus/netns/internal/nstest"
)

var (
	gateway = netip.MustParsePrefix("10.210.3.1/24")
	bridge  = netns.Bridge{Name: "corpusbr0", Gateway: gateway, MTU: 1450}
)

func rootForwarding(t *testing.T) string {
	t.Helper()
	v, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err != nil {
		t.Fatal(err)
	}
	return string(v)
}

// ensure runs EnsureBridge inside ns.
func ensure(t *testing.T, ns *nstest.NS, h *netns.Host, b netns.Bridge) netns.BridgeChanges {
	t.Helper()
	var ch netns.BridgeChanges
	ns.MustDo(func() (err error) { ch, err = h.EnsureBridge(context.Background(), b); return err })
	return ch
}

func status(t *testing.T, ns *nstest.NS, h *netns.Host, name string) netns.BridgeState {
	t.Helper()
	var st netns.BridgeState
	ns.MustDo(func() (err error) { st, err = h.BridgeStatus(context.Background(), name); return err })
	return st
}

func linkIndex(t *testing.T, ns *nstest.NS, name string) int {
	t.Helper()
	var idx int
	ns.MustDo(func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		idx = l.Attrs().Index
		return nil
	})
	return idx
}

func TestEnsureBridgeCreatesAndIsIdempotent(t *testing.T) {
	nstest.RequireRoot(t)
	t.Parallel()
	rootFwd := rootForwarding(t)
	ns := nstest.New(t, "br")
	h := netns.New(netns.Config{})
	// A new namespace inherits the root namespace's ip_forward (IPv4's
	// historical devconf_inherit_init_net behaviour), so it may be on.
	fwdBefore := strings.TrimSpace(ns.MustRun("cat", "/proc/sys/net/ipv4/ip_forward")) == "1"

	ch := ensure(t, ns, h, bridge)
	if !ch.Created || ch.Forwarding == fwdBefore || !slices.Equal(ch.AddedAddrs, []netip.Prefix{gateway}) {
		t.Errorf("first EnsureBridge = %+v, want created, gateway added, forwarding enabled (was on: %v)", ch, fwdBefore)
	}
	st := status(t, ns, h, bridge.Name)
	want := netns.BridgeState{Name: bridge.Name, Exists: true, Up: true, MTU: 1450, Addrs: []netip.Prefix{gateway}, Forwarding: true}
	if !equalState(st, want) {
		t.Errorf("BridgeStatus = %+v, want %+v", st, want)
	}
	idx := linkIndex(t, ns, bridge.Name)

	for i := range 3 {
		if ch := ensure(t, ns, h, bridge); ch.Changed() {
			t.Errorf("EnsureBridge #%d on a correct host = %+v, want no changes", i+2, ch)
		}
	}
	if got := linkIndex(t, ns, bridge.Name); got != idx {
		t.Errorf("bridge index after repeated EnsureBridge = %d, want %d (unchanged)", got, idx)
	}
	if got := rootForwarding(t); got != rootFwd {
		t.Errorf("root namespace ip_forward = %q, want %q (untouched)", got, rootFwd)
	}
}

func TestEnsureBridgeRepairs(t *testing.T) {
	nstest.RequireRoot(t)
	t.Parallel()
	ns := nstest.New(t, "brfix")
	h := netns.New(netns.Config{})
	ensure(t, ns, h, bridge)
	other := netip.MustParsePrefix("192.0.2.5/24")
	stale := netip.MustParsePrefix("10.210.3.7/24")

	tests := []struct {
		name   string
		break_ func() error
		want   netns.BridgeChanges
	}{
		{
			name:   "deleted bridge",
			break_: func() error { return delLink(bridge.Name) },
			want:   netns.BridgeChanges{Created: true, AddedAddrs: []netip.Prefix{gateway}},
		},
		{
			name:   "removed gateway",
			break_: func() error { return addrDel(bridge.Name, gateway) },
			want:   netns.BridgeChanges{AddedAddrs: []netip.Prefix{gateway}},
		},
		{
			name: "stale address in the subnet, foreign address elsewhere",
			break_: func() error {
				if err := addrDel(bridge.Name, gateway); err != nil {
					return err
				}
				if err := addrAdd(bridge.Name, stale); err != nil {
					return err
				}
				return addrAdd(bridge.Name, other)
			},
			want: netns.BridgeChanges{RemovedAddrs: []netip.Prefix{stale}, AddedAddrs: []netip.Prefix{gateway}},
		},
		{
			name: "set down",
			break_: func() error {
				l, err := netlink.LinkByName(bridge.Name)
				if err != nil {
					return err
				}
				return netlink.LinkSetDown(l)
			},
			want: netns.BridgeChanges{SetUp: true},
		},
		{
			name: "MTU changed",
			break_: func() error {
				l, err := netlink.LinkByName(bridge.Name)
				if err != nil {
					return err
				}
				return netlink.LinkSetMTU(l, 1300)
			},
			want: netns.BridgeChanges{SetMTU: true},
		},
		{
			name:   "forwarding off",
			break_: func() error { return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("0"), 0o644) },
			want:   netns.BridgeChanges{Forwarding: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns.MustDo(tt.break_)
			got := ensure(t, ns, h, bridge)
			if !equalChanges(got, tt.want) {
				t.Errorf("EnsureBridge after %s = %+v, want %+v", tt.name, got, tt.want)
			}
			if ch := ensure(t, ns, h, bridge); ch.Changed() {
				t.Errorf("EnsureBridge after the repair = %+v, want no changes", ch)
			}
			st := status(t, ns, h, bridge.Name)
			if !st.Exists || !st.Up || st.MTU != bridge.MTU || !st.Forwarding || !slices.Contains(st.Addrs, gateway) || slices.Contains(st.Addrs, stale) {
				t.Errorf("BridgeStatus after repair = %+v, want up, MTU %d, forwarding, with %v and without %v", st, bridge.MTU, gateway, stale)
			}
		})
	}
	if st := status(t, ns, h, bridge.Name); !slices.Contains(st.Addrs, other) {
		t.Errorf("BridgeStatus addresses = %v, want the foreign address %v left alone", st.Addrs, other)
	}
}

func TestEnsureBridgeRefusesForeignLink(t *testing.T) {
	nstest.RequireRoot(t)
	t.Parallel()
	ns := nstest.New(t, "brforeign")
	h := netns.New(netns.Config{})
	ns.MustDo(func() error {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = bridge.Name
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "foreignp"})
	})
	err := ns.Do(func() error { _, err := h.EnsureBridge(context.Background(), bridge); return err })
	if !errors.Is(err, netns.ErrNotBridge) {
		t.Errorf("EnsureBridge over a veth = %v, want ErrNotBridge", err)
	}
	err = ns.Do(func() error { return h.DeleteBridge(context.Background(), bridge.Name) })
	if !errors.Is(err, netns.ErrNotBridge) {
		t.Errorf("DeleteBridge of a veth = %v, want ErrNotBridge", err)
	}
	ns.MustDo(func() error {
		l, err := netlink.LinkByName(bridge.Name)
		if err != nil {
			return err
		}
		if l.Type() != "veth" {
			return errors.New("foreign veth was replaced")
		}
		return nil
	})
}

func TestDeleteBridge(t *testing.T) {
	nstest.RequireRoot(t)
	t.Parallel()
	ns := nstest.New(t, "brdel")
	h := netns.New(netns.Config{})
	ensure(t, ns, h, bridge)
	for i := range 2 { // the second delete finds nothing and succeeds
		ns.MustDo(func() error { return h.DeleteBridge(context.Background(), bridge.Name) })
		if st := status(t, ns, h, bridge.Name); st.Exists {
			t.Errorf("BridgeStatus after DeleteBridge #%d = %+v, want Exists false", i+1, st)
		}
	}
}

func TestEnsureVeth(t *testing.T) {
	nstest.RequireRoot(t)
	t.Parallel()
	node := nstest.New(t, "vnode")
	guest := nstest.New(t, "vguest")
	h := netns.New(netns.Config{})
	ensure(t, node, h, bridge)
	v := netns.Veth{Name: "vg1", Peer: "eth0", Bridge: bridge.Name, PeerNS: guest.Path}

	var created bool
	node.MustDo(func() (err error) { created, err = h.EnsureVeth(context.Background(), v); return err })
	if !created {
		t.Error("first EnsureVeth created = false, want true")
	}
	guest.MustDo(func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if l.Attrs().MTU != bridge.MTU {
			t.Errorf("peer MTU = %d, want the bridge's %d", l.Attrs().MTU, bridge.MTU)
		}
		return nil
	})
	wantPorts := []netns.Port{{Name: "vg1", Up: true, Hairpin: true}}
	if st := status(t, node, h, bridge.Name); !slices.Equal(st.Ports, wantPorts) {
		t.Errorf("bridge ports = %+v, want %+v", st.Ports, wantPorts)
	}
	node.MustDo(func() (err error) { created, err = h.EnsureVeth(context.Background(), v); return err })
	if created {
		t.Error("second EnsureVeth created = true, want false")
	}

	// Detach, hairpin off, down: EnsureVeth puts it back.
	node.MustDo(func() error {
		l, err := netlink.LinkByName("vg1")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetHairpin(l, false); err != nil {
			return err
		}
		if err := netlink.LinkSetNoMaster(l); err != nil {
			return err
		}
		return netlink.LinkSetDown(l)
	})
	node.MustDo(func() (err error) { _, err = h.EnsureVeth(context.Background(), v); return err })
	if st := status(t, node, h, bridge.Name); !slices.Equal(st.Ports, wantPorts) {
		t.Errorf("bridge ports after repair = %+v, want %+v", st.Ports, wantPorts)
	}

	// A port attached by someone else (LXC does this) gets hairpin mode
	// from EnsureBridge.
	node.MustDo(func() error {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = "vlxc"
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "vlxcp"}); err != nil {
			return err
		}
		l, err := netlink.LinkByName("vlxc")
		if err != nil {
			return err
		}
		br, err := netlink.LinkByName(bridge.Name)
		if err != nil {
			return err
		}
		return netlink.LinkSetMaster(l, br)
	})
	if ch := ensure(t, node, h, bridge); !slices.Equal(ch.HairpinPorts, []string{"vlxc"}) {
		t.Errorf("EnsureBridge with a new port = %+v, want HairpinPorts [vlxc]", ch)
	}

	// A bridge deleted and recreated by hand loses its ports; EnsurePort
	// puts an existing link back without creating anything.
	node.MustDo(func() error { return delLink(bridge.Name) })
	ensure(t, node, h, bridge)
	var changed bool
	node.MustDo(func() (err error) { changed, err = h.EnsurePort(context.Background(), bridge.Name, "vlxc"); return err })
	if !changed {
		t.Error("EnsurePort of a detached link changed = false, want true")
	}
	node.MustDo(func() (err error) { changed, err = h.EnsurePort(context.Background(), bridge.Name, "vlxc"); return err })
	if changed {
		t.Error("second EnsurePort changed = true, want false")
	}
	if st := status(t, node, h, bridge.Name); !slices.Equal(st.Ports, []netns.Port{{Name: "vlxc", Up: true, Hairpin: true}}) {
		t.Errorf("bridge ports after EnsurePort = %+v, want vlxc up with hairpin", st.Ports)
	}
	if err := node.Do(func() error { _, err := h.EnsurePort(context.Background(), bridge.Name, "nosuch"); return err }); !errors.Is(err, netns.ErrNoLink) {
		t.Errorf("EnsurePort of a missing link = %v, want ErrNoLink", err)
	}

	for range 2 {
		node.MustDo(func() error { return h.DeleteLink(context.Background(), "vg1") })
	}
	guest.MustDo(func() error {
		if _, err := netlink.LinkByName("eth0"); err == nil {
			return errors.New("peer eth0 still exists after DeleteLink of vg1")
		}
		return nil
	})

	err := node.Do(func() error {
		_, err := h.EnsureVeth(context.Background(), netns.Veth{Name: "vg2", Peer: "vg2p", Bridge: "nosuchbr"})
		return err
	})
	if !errors.Is(err, netns.ErrNoBridge) {
		t.Errorf("EnsureVeth onto a missing bridge = %v, want ErrNoBridge", err)
	}
}

// TestReverterUndoesBridgeAndVeth shows the intended caller pattern: a
// failure after the bridge and veth were made leaves neither behind.
func TestReverterUndoesBridgeAndVeth(t *testing.T) {
	nstest.RequireRoot(t)
	t.Parallel()
	node := nstest.New(t, "rvnode")
	h := netns.New(netns.Config{})
	ctx := context.Background()
	errLater := errors.New("a later step failed")
	err := node.Do(func() error {
		r := revert.New()
		defer r.Fail()
		ch, err := h.EnsureBridge(ctx, bridge)
		if err != nil {
			return err
		}
		if ch.Created {
			r.Add(func() { _ = h.DeleteBridge(ctx, bridge.Name) })
		}
		created, err := h.EnsureVeth(ctx, netns.Veth{Name: "vg1", Peer: "vg1p", Bridge: bridge.Name})
		if err != nil {
			return err
		}
		if created {
			r.Add(func() { _ = h.DeleteLink(ctx, "vg1") })
		}
		return errLater
	})
	if !errors.Is(err, errLater) {
		t.Fatalf("steps = %v, want %v", err, errLater)
	}
	node.MustDo(func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if n := l.Attrs().Name; n != "lo" {
				t.Errorf("link %s left behind after revert", n)
			}
		}
		return nil
	})
}

func delLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkDel(l)
}

func addrAdd(name string, p netip.Prefix) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}})
}

func addrDel(name string, p netip.Prefix) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.AddrDel(l, &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}})
}

func equalChanges(a, b netns.BridgeChanges) bool {
	return a.Created == b.Created && a.SetMTU == b.SetMTU && slices.Equal(a.AddedAddrs, b.AddedAddrs) &&
		slices.Equal(a.RemovedAddrs, b.RemovedAddrs) && a.SetUp == b.SetUp &&
		slices.Equal(a.HairpinPorts, b.HairpinPorts) && a.Forwarding == b.Forwarding
}

func equalState(a, b netns.BridgeState) bool {
	return a.Name == b.Name && a.Exists == b.Exists && a.Up == b.Up && a.MTU == b.MTU &&
		slices.Equal(a.Addrs, b.Addrs) && slices.Equal(a.Ports, b.Ports) && a.Forwarding == b.Forwarding
}

func TestMain(m *testing.M) { nstest.Main(m) }
