package l2filter_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"corpus/internal/testrun"
	"corpus/netns"
	"corpus/netns/internal/nstest"
	"corpus/netns/l2filter"
)

// The lab: a node namespace with bridge br0 (10.210.3.1/24) and two
// guests on it, each in a namespace of its own behind a veth whose node
// end is named as the agent names guest ports.
var (
	gateway      = netip.MustParsePrefix("10.210.3.1/24")
	victimAddr   = netip.MustParseAddr("10.210.3.2")
	attackerAddr = netip.MustParseAddr("10.210.3.3")
	victimMAC    = mustMAC("02:00:00:00:00:02")
	attackerMAC  = mustMAC("02:00:00:00:00:03")
)

const prefix = "cg"

type lab struct {
	node, victim, attacker *nstest.NS
	f                      *l2filter.Filter
	// ports are the two guests' ports, as the agent would give them.
	ports []l2filter.Port
}

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func newLab(t *testing.T) *lab {
	t.Helper()
	nstest.RequireRoot(t)
	l := &lab{node: nstest.New(t, "node"), victim: nstest.New(t, "victim"), attacker: nstest.New(t, "attacker")}
	host := netns.New(netns.Config{Logger: nstest.Logger(t)})
	br := netns.Bridge{Name: "br0", Gateway: gateway}
	l.node.MustDo(func() error { _, err := host.EnsureBridge(context.Background(), br); return err })
	l.addGuest(t, host, l.victim, "cg1", victimMAC, victimAddr)
	l.addGuest(t, host, l.attacker, "cg2", attackerMAC, attackerAddr)
	l.ports = []l2filter.Port{
		{Iface: "cg1", MAC: victimMAC, Addr: victimAddr},
		{Iface: "cg2", MAC: attackerMAC, Addr: attackerAddr},
	}
	f, err := l2filter.New(l2filter.Config{PortPrefix: prefix, Logger: nstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	l.f = f
	return l
}

// addGuest joins ns to the bridge through port, its eth0 carrying mac
// and addr.
func (l *lab) addGuest(t *testing.T, host *netns.Host, ns *nstest.NS, port string, mac net.HardwareAddr, addr netip.Addr) {
	t.Helper()
	v := netns.Veth{Name: port, Peer: "eth0", Bridge: "br0", PeerNS: ns.Path}
	l.node.MustDo(func() error { _, err := host.EnsureVeth(context.Background(), v); return err })
	setMAC(t, ns, mac)
	ns.Iface("eth0", netip.PrefixFrom(addr, gateway.Bits()), gateway.Addr())
}

func setMAC(t *testing.T, ns *nstest.NS, mac net.HardwareAddr) {
	t.Helper()
	ns.MustDo(func() error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		return netlink.LinkSetHardwareAddr(link, mac)
	})
}

func (l *lab) apply(t *testing.T, ports []l2filter.Port) l2filter.Changes {
	t.Helper()
	var ch l2filter.Changes
	l.node.MustDo(func() (err error) { ch, err = l.f.Apply(context.Background(), ports); return err })
	return ch
}

func (l *lab) observed(t *testing.T) l2filter.State {
	t.Helper()
	var st l2filter.State
	l.node.MustDo(func() (err error) { st, err = l.f.Observed(context.Background()); return err })
	return st
}

// neighbour is the MAC the node's neighbour table holds for addr on the
// bridge, nil when it holds none.
func (l *lab) neighbour(t *testing.T, addr netip.Addr) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	l.node.MustDo(func() error {
		br, err := netlink.LinkByName("br0")
		if err != nil {
			return err
		}
		ns, err := netlink.NeighList(br.Attrs().Index, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, n := range ns {
			if a, ok := netip.AddrFromSlice(n.IP.To4()); ok && a == addr && n.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) == 0 {
				mac = n.HardwareAddr
			}
		}
		return nil
	})
	return mac
}

// forgetNeighbour deletes the node's neighbour entry for addr.
func (l *lab) forgetNeighbour(t *testing.T, addr netip.Addr) {
	t.Helper()
	l.node.MustDo(func() error {
		br, err := netlink.LinkByName("br0")
		if err != nil {
			return err
		}
		err = netlink.NeighDel(&netlink.Neigh{LinkIndex: br.Attrs().Index, Family: netlink.FAMILY_V4, IP: net.IP(addr.AsSlice())})
		if err != nil && err != unix.ENOENT {
			return err
		}
		return nil
	})
}

// fdbPort is the bridge port the bridge forwards frames for mac to.
func (l *lab) fdbPort(t *testing.T, mac net.HardwareAddr) string {
	t.Helper()
	var port string
	l.node.MustDo(func() error {
		br, err := netlink.LinkByName("br0")
		if err != nil {
			return err
		}
		fdb, err := netlink.NeighList(0, unix.AF_BRIDGE)
		if err != nil {
			return err
		}
		for _, n := range fdb {
			if n.MasterIndex != br.Attrs().Index || n.HardwareAddr.String() != mac.String() {
				continue
			}
			link, err := netlink.LinkByIndex(n.LinkIndex)
			if err != nil {
				return err
			}
			port = link.Attrs().Name
		}
		return nil
	})
	return port
}

// dropped is how many frames the filter has dropped.
func (l *lab) dropped(t *testing.T) uint64 { return l.observed(t).Dropped }

// waitDropped waits until the filter has dropped n frames more than
// before: what a guest sent meanwhile has met the filter.
func (l *lab) waitDropped(t *testing.T, before, n uint64, what string) {
	t.Helper()
	testrun.Wait(t, 5*time.Second, what, func() error {
		if got := l.dropped(t); got < before+n {
			return fmt.Errorf("%d frames dropped, want %d", got-before, n)
		}
		return nil
	})
}

// serveTCP answers every connection on addr inside ns with name.
func serveTCP(t *testing.T, ns *nstest.NS, name, addr string) {
	ln := ns.Listen("tcp4", addr)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, name)
			c.Close()
		}
	}()
}

// ask connects from ns to addr and returns who answered.
func ask(ns *nstest.NS, network, addr string) (string, error) {
	c, err := ns.Dial(network, addr, testrun.D(2*time.Second))
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(testrun.D(2 * time.Second)))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// arp is an ARP packet for IPv4 over Ethernet, in the Ethernet frame it
// is sent in.
type arp struct {
	src      net.HardwareAddr // the frame's source
	dst      net.HardwareAddr // the frame's destination; nil broadcasts
	op       uint16           // 1 request, 2 reply
	sha, tha net.HardwareAddr
	spa, tpa netip.Addr
}

// garp is a gratuitous ARP of from's: it announces addr at mac.
func garp(from, mac net.HardwareAddr, addr netip.Addr, op uint16) arp {
	return arp{src: from, op: op, sha: mac, spa: addr, tha: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, tpa: addr}
}

func (a arp) frame() []byte {
	dst := a.dst
	if dst == nil {
		dst = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	}
	b := append(append([]byte{}, dst...), a.src...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_ARP)
	b = append(b, 0, 1, 8, 0, 6, 4)
	b = binary.BigEndian.AppendUint16(b, a.op)
	spa, tpa := a.spa.As4(), a.tpa.As4()
	b = append(append(append(append(b, a.sha...), spa[:]...), a.tha...), tpa[:]...)
	for len(b) < 60 {
		b = append(b, 0)
	}
	return b
}

// udpFrame is a UDP datagram to the node's gateway address in an
// Ethernet frame from src (to dst).
func udpFrame(src, dst net.HardwareAddr, from netip.Addr, payload string) []byte {
	b := append(append([]byte{}, dst...), src...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_IP)
	ip := []byte{0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, unix.IPPROTO_UDP, 0, 0}
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	f, to := from.As4(), gateway.Addr().As4()
	ip = append(append(ip, f[:]...), to[:]...)
	var sum uint32
	for i := 0; i < len(ip); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := binary.BigEndian.AppendUint16(nil, 40000)
	udp = binary.BigEndian.AppendUint16(udp, 7001)
	udp = binary.BigEndian.AppendUint16(udp, uint16(8+len(payload)))
	udp = append(udp, 0, 0) // no checksum, as IPv4 allows
	b = append(append(append(b, ip...), udp...), payload...)
	for len(b) < 60 {
		b = append(b, 0)
	}
	return b
}

// sendFrames writes raw Ethernet frames out of eth0 in ns, as root in a
// guest can.
func sendFrames(ns *nstest.NS, frames ...[]byte) error {
	return ns.Do(func() error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		defer unix.Close(fd)
		to := &unix.SockaddrLinklayer{Ifindex: link.Attrs().Index, Protocol: htons(unix.ETH_P_ALL)}
		for _, f := range frames {
			if err := unix.Sendto(fd, f, 0, to); err != nil {
				return fmt.Errorf("sending a frame: %w", err)
			}
		}
		return nil
	})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func TestMain(m *testing.M) { nstest.Main(m) }
