package l2filter_test

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"corpus/internal/testrun"
	"corpus/netns/internal/nstest"
	"corpus/netns/l2filter"
)

// TestSpoofedARP: a guest that takes another guest's address and
// announces it (gratuitous ARP requests and replies, a reply sent
// straight to the node, a frame under the other guest's MAC) moves
// neither the node's neighbour entry nor the bridge's forwarding entry
// of the other guest, and the node's connections still reach it. Without
// the filter the same attack takes the address over: the lab first shows
// it does.
func TestSpoofedARP(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	serveTCP(t, l.victim, "victim", ":80")
	serveTCP(t, l.attacker, "attacker", ":80")
	victim := netip.AddrPortFrom(victimAddr, 80).String()
	if who, err := ask(l.node, "tcp4", victim); who != "victim" {
		t.Fatalf("the node asking %s: answered by %q (%v), want victim", victim, who, err)
	}
	if got := l.neighbour(t, victimAddr); got.String() != victimMAC.String() {
		t.Fatalf("the node's neighbour entry for %v = %v, want the victim's %v", victimAddr, got, victimMAC)
	}
	// The attacker holds the victim's address, as root in a guest can.
	l.attacker.MustRun("ip", "addr", "add", victimAddr.String()+"/32", "dev", "eth0")
	announce := garp(attackerMAC, attackerMAC, victimAddr, 1)

	// Without the filter, the announcement takes the address over.
	testrun.Wait(t, 5*time.Second, "the attacker's announcement to move the node's entry", func() error {
		if err := sendFrames(l.attacker, announce.frame()); err != nil {
			return err
		}
		if got := l.neighbour(t, victimAddr); got.String() != attackerMAC.String() {
			return fmt.Errorf("entry for %v is %v", victimAddr, got)
		}
		return nil
	})
	if who, _ := ask(l.node, "tcp4", victim); who != "attacker" {
		t.Fatalf("without the filter, the node asking %s after the attack was answered by %q; the lab should show the attack working", victim, who)
	}

	// With the filter: the node learns the victim again, and no attack
	// moves it.
	if ch := l.apply(t, l.ports); !ch.Table || len(ch.Added) != 2 {
		t.Errorf("first Apply = %+v, want the table made with 2 ports", ch)
	}
	l.forgetNeighbour(t, victimAddr)
	if who, err := ask(l.node, "tcp4", victim); who != "victim" {
		t.Fatalf("with the filter, the node asking %s: answered by %q (%v), want victim", victim, who, err)
	}
	nodeMAC := l.bridgeMAC(t)
	attacks := []struct {
		name  string
		frame []byte
	}{
		{"gratuitous request", announce.frame()},
		{"gratuitous reply", garp(attackerMAC, attackerMAC, victimAddr, 2).frame()},
		{"reply to the node", arp{src: attackerMAC, dst: nodeMAC, op: 2, sha: attackerMAC, spa: victimAddr, tha: nodeMAC, tpa: gateway.Addr()}.frame()},
		{"request naming the victim's MAC", arp{src: attackerMAC, op: 1, sha: victimMAC, spa: attackerAddr, tha: make(net.HardwareAddr, 6), tpa: gateway.Addr()}.frame()},
		{"announcement under the victim's MAC", garp(victimMAC, victimMAC, victimAddr, 1).frame()},
		{"probe from 0.0.0.0", arp{src: attackerMAC, op: 1, sha: attackerMAC, spa: netip.IPv4Unspecified(), tha: make(net.HardwareAddr, 6), tpa: victimAddr}.frame()},
		{"IPv4 from its own address under the victim's MAC", udpFrame(victimMAC, nodeMAC, attackerAddr, "under the victim's MAC")},
		{"IPv4 from the victim's address", udpFrame(attackerMAC, nodeMAC, victimAddr, "from the victim's address")},
	}
	heard := l.node.ListenPacket("udp4", gateway.Addr().String()+":7001")
	for _, at := range attacks {
		before := l.dropped(t)
		if err := sendFrames(l.attacker, at.frame); err != nil {
			t.Fatal(err)
		}
		l.waitDropped(t, before, 1, at.name+" dropped")
		if got := l.neighbour(t, victimAddr); got.String() != victimMAC.String() {
			t.Errorf("after the attacker's %s, the node's entry for %v = %v, want the victim's %v", at.name, victimAddr, got, victimMAC)
		}
		if port := l.fdbPort(t, victimMAC); port != "cg1" {
			t.Errorf("after the attacker's %s, the bridge sends %v to port %q, want cg1", at.name, victimMAC, port)
		}
		if got := l.neighbour(t, attackerAddr); got != nil && got.String() != attackerMAC.String() {
			t.Errorf("after the attacker's %s, the node's entry for the attacker's %v = %v, want its own %v", at.name, attackerAddr, got, attackerMAC)
		}
	}
	// What the node hears from the attacker is its own datagram only.
	if err := sendFrames(l.attacker, udpFrame(attackerMAC, nodeMAC, attackerAddr, "real")); err != nil {
		t.Fatal(err)
	}
	heard.SetReadDeadline(time.Now().Add(testrun.D(5 * time.Second)))
	buf := make([]byte, 64)
	if n, from, err := heard.ReadFrom(buf); err != nil || string(buf[:n]) != "real" {
		t.Errorf("the node heard %q from %v (%v), want only the attacker's real datagram", buf[:n], from, err)
	}
	if who, err := ask(l.node, "tcp4", victim); who != "victim" {
		t.Errorf("after the attacks, the node asking %s: answered by %q (%v), want victim", victim, who, err)
	}
	// The attacker's own address still works both ways.
	if who, err := ask(l.node, "tcp4", netip.AddrPortFrom(attackerAddr, 80).String()); who != "attacker" {
		t.Errorf("the node asking the attacker at its own address: %q (%v)", who, err)
	}
}

// bridgeMAC is the node's MAC on the bridge.
func (l *lab) bridgeMAC(t *testing.T) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	l.node.MustDo(func() error {
		ifi, err := net.InterfaceByName("br0")
		if err != nil {
			return err
		}
		mac = ifi.HardwareAddr
		return nil
	})
	return mac
}

// TestChangedMAC: a guest that changes its MAC and keeps talking is not
// heard, and is heard again once it takes its own MAC back.
func TestChangedMAC(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	pc := l.node.ListenPacket("udp4", gateway.Addr().String()+":7001")
	heard := make(chan string, 16)
	go func() {
		buf := make([]byte, 64)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			heard <- string(buf[:n])
		}
	}()
	send := func(msg string) {
		t.Helper()
		l.attacker.MustDo(func() error {
			c, err := net.Dial("udp4", gateway.Addr().String()+":7001")
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte(msg))
			return err
		})
	}
	hear := func(want string) []string {
		t.Helper()
		var got []string
		testrun.Wait(t, 5*time.Second, "the node to hear "+want, func() error {
			send(want)
			for {
				select {
				case m := <-heard:
					got = append(got, m)
					if m == want {
						return nil
					}
				default:
					return fmt.Errorf("heard %q", got)
				}
			}
		})
		return got
	}
	l.apply(t, l.ports)
	hear("own MAC")
	setMAC(t, l.attacker, mustMAC("02:00:00:00:00:99"))
	// A new MAC empties the guest's neighbour table, and its ARP under
	// the new MAC is dropped: it sets the node's MAC by hand.
	l.attacker.MustRun("ip", "neigh", "replace", gateway.Addr().String(), "lladdr", l.bridgeMAC(t).String(), "dev", "eth0", "nud", "permanent")
	before := l.dropped(t)
	send("changed MAC")
	l.waitDropped(t, before, 1, "the datagram under another MAC dropped")
	setMAC(t, l.attacker, attackerMAC)
	if got := hear("own MAC again"); slices.Contains(got, "changed MAC") {
		t.Errorf("the node heard the guest under another MAC: %q", got)
	}
}

// TestIPv6Dropped: guests get no IPv6, and reach each other over none
// (link-local IPv6 would pass beneath every IPv4 rule); their IPv4 is
// untouched.
func TestIPv6Dropped(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	serveTCP(t, l.victim, "victim", ":80")
	var ll netip.Addr
	testrun.Wait(t, 10*time.Second, "the guest's link-local IPv6 address", func() error {
		return l.victim.Do(func() error {
			ifi, err := net.InterfaceByName("eth0")
			if err != nil {
				return err
			}
			addrs, err := ifi.Addrs()
			if err != nil {
				return err
			}
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
					ll = p.Addr()
					return nil
				}
			}
			return fmt.Errorf("eth0 has %v", addrs)
		})
	})
	target := netip.AddrPortFrom(ll.WithZone("eth0"), 80).String()
	serveTCP6(t, l)
	testrun.Wait(t, 10*time.Second, "the guests reaching each other over link-local IPv6 without the filter", func() error {
		who, err := ask(l.attacker, "tcp6", target)
		if who != "victim6" {
			return fmt.Errorf("answered by %q: %v", who, err)
		}
		return nil
	})
	l.apply(t, l.ports)
	before := l.dropped(t)
	if who, err := ask(l.attacker, "tcp6", target); err == nil {
		t.Errorf("with the filter, a guest reached another over IPv6 (%q)", who)
	}
	l.waitDropped(t, before, 1, "IPv6 dropped")
	if who, err := ask(l.attacker, "tcp4", netip.AddrPortFrom(victimAddr, 80).String()); who != "victim" {
		t.Errorf("with the filter, a guest asking another over IPv4: %q (%v), want victim", who, err)
	}
}

func serveTCP6(t *testing.T, l *lab) {
	ln := l.victim.Listen("tcp6", "[::]:80")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "victim6")
			c.Close()
		}
	}()
}

// TestUnknownGuestPort: a port named as guest ports are but not given to
// Apply sends nothing; once given, it does. Ports named otherwise are
// not the filter's.
func TestUnknownGuestPort(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	serveTCP(t, l.node, "node", gateway.Addr().String()+":7000")
	node := gateway.Addr().String() + ":7000"
	l.apply(t, l.ports[:1]) // the attacker's port is not known
	before := l.dropped(t)
	if who, err := ask(l.attacker, "tcp4", node); err == nil {
		t.Errorf("a guest on an unknown port reached the node (%q)", who)
	}
	l.waitDropped(t, before, 1, "frames of the unknown port dropped")
	if ch := l.apply(t, l.ports); !slices.Equal(ch.Added, []string{"cg2"}) || ch.Table || ch.Rules {
		t.Errorf("Apply with the port added = %+v, want cg2 added alone", ch)
	}
	// The guest's own neighbour cache may still hold the gateway's
	// failed resolution from while it was dropped (connect says "no
	// route to host" until the kernel asks again): it gets through once
	// it asks again, without anything else changing.
	testrun.Wait(t, 10*time.Second, "the guest reaching the node once its port is known", func() error {
		if who, err := ask(l.attacker, "tcp4", node); who != "node" {
			return fmt.Errorf("answered by %q: %v", who, err)
		}
		return nil
	})

	// Without a port prefix, unknown ports are let through.
	open, err := l2filter.New(l2filter.Config{Logger: nstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	l.node.MustDo(func() error { _, err := open.Apply(t.Context(), l.ports[:1]); return err })
	if who, err := ask(l.attacker, "tcp4", node); who != "node" {
		t.Errorf("without a port prefix, a guest on an unknown port: %q (%v), want node", who, err)
	}
}

// TestSpoofedSource: a guest sending IPv4 with another guest's address
// (added to its own interface, as root in its namespace can) is dropped
// at its port: the node's resolver port, open to guests, never sees the
// spoofed source, while the guest's own address gets through. Without
// the filter the lab shows both arrive. The node's iptables rules (package
// nat) name guests by source address and rest on this.
func TestSpoofedSource(t *testing.T) {
	t.Parallel()
	l := newLab(t)
	var pc net.PacketConn
	l.node.MustDo(func() (err error) { pc, err = net.ListenPacket("udp4", gateway.Addr().String()+":53"); return err })
	t.Cleanup(func() { pc.Close() })
	seen := make(chan string, 16)
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			seen <- string(buf[:n]) + " from " + from.(*net.UDPAddr).IP.String()
		}
	}()
	l.attacker.MustRun("ip", "addr", "add", victimAddr.String()+"/32", "dev", "eth0")
	send := func(from netip.Addr, msg string) {
		t.Helper()
		l.attacker.MustDo(func() error {
			c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(gateway.Addr(), 53)))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte(msg))
			return err
		})
	}
	received := func(want ...string) {
		t.Helper()
		// Whatever arrives within the wait: a datagram too many fails too.
		deadline := time.After(testrun.D(2 * time.Second))
		var got []string
	collect:
		for {
			select {
			case s := <-seen:
				got = append(got, s)
			case <-deadline:
				break collect
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("the node received %q, want %q", got, want)
		}
	}

	send(victimAddr, "spoofed")
	send(attackerAddr, "real")
	received("real from "+attackerAddr.String(), "spoofed from "+victimAddr.String())

	l.apply(t, l.ports)
	before := l.dropped(t)
	send(victimAddr, "spoofed")
	send(attackerAddr, "real")
	received("real from " + attackerAddr.String())
	l.waitDropped(t, before, 1, "the spoofed datagram dropped")
}
