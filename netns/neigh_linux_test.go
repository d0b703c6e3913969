package netns_test

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"corpus/netns"
	"corpus/netns/internal/nstest"
)

// TestCorrectNeighbors: an entry of a guest's address that names the MAC
// of a guest gone (its address reused) is set to the new guest's MAC;
// right entries, entries of addresses corpus does not name and
// permanent ones stay as they are; a second pass changes nothing.
func TestCorrectNeighbors(t *testing.T) {
	nstest.RequireRoot(t)
	t.Parallel()
	ns := nstest.New(t, "ng")
	h := netns.New(netns.Config{})
	ensure(t, ns, h, bridge)
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	old, fresh, other, right := mac("02:00:00:00:00:01"), mac("02:00:00:00:00:02"), mac("02:00:00:00:00:03"), mac("02:00:00:00:00:04")
	reused, unknown, kept, pinned := netip.MustParseAddr("10.210.3.7"), netip.MustParseAddr("10.210.3.9"), netip.MustParseAddr("10.210.3.8"), netip.MustParseAddr("10.210.3.10")
	idx := linkIndex(t, ns, bridge.Name)
	ns.MustDo(func() error {
		for _, n := range []struct {
			addr  netip.Addr
			mac   net.HardwareAddr
			state int
		}{{reused, old, unix.NUD_REACHABLE}, {unknown, other, unix.NUD_REACHABLE}, {kept, right, unix.NUD_REACHABLE}, {pinned, other, unix.NUD_PERMANENT}} {
			if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET, State: n.state, IP: n.addr.AsSlice(), HardwareAddr: n.mac}); err != nil {
				return err
			}
		}
		return nil
	})
	want := []netns.Neighbor{{Addr: reused, MAC: fresh}, {Addr: kept, MAC: right}, {Addr: pinned, MAC: fresh}, {Addr: netip.MustParseAddr("10.210.3.11"), MAC: fresh}}
	correct := func() []netip.Addr {
		var fixed []netip.Addr
		ns.MustDo(func() (err error) {
			fixed, err = h.CorrectNeighbors(context.Background(), bridge.Name, want)
			return err
		})
		return fixed
	}
	if got := correct(); !slices.Equal(got, []netip.Addr{reused}) {
		t.Errorf("CorrectNeighbors = %v, want [%s]", got, reused)
	}
	have := map[netip.Addr]string{}
	ns.MustDo(func() error {
		list, err := netlink.NeighList(idx, unix.AF_INET)
		for _, n := range list {
			a, _ := netip.AddrFromSlice(n.IP.To4())
			have[a] = n.HardwareAddr.String()
		}
		return err
	})
	for a, m := range map[netip.Addr]net.HardwareAddr{reused: fresh, unknown: other, kept: right, pinned: other} {
		if have[a] != m.String() {
			t.Errorf("neighbour %s = %q, want %s", a, have[a], m)
		}
	}
	if _, ok := have[netip.MustParseAddr("10.210.3.11")]; ok {
		t.Error("an address with no entry got one")
	}
	if got := correct(); len(got) != 0 {
		t.Errorf("a second CorrectNeighbors = %v, want nothing to correct", got)
	}
}
