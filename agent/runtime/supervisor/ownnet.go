package supervisor

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"corpus/internal/tcprelay"
)

// A process of an image that listens on a port of its own (the port its
// config exposes) runs in a network namespace of its own, as in a
// container of Docker's: the release serving and the one starting beside
// it each listen on that port without meeting. The chroot command, given
// -net OUTER:INNER, listens on OUTER in the guest's network (the port
// the deploy gave web, where the routes lead) and relays each connection
// to INNER in the process's network. That network has a veth pair to the
// guest's (a /30 of 169.254.0.0/16 named after OUTER), a default route
// through it and, in the guest's network, forwarding and a masquerade of
// those addresses (table ip corpus_release), so the process reaches what
// the guest reaches, from the guest's address. The namespace, its link
// and the relay end with the process; the masquerade stays, for the next.

// NetFlag is the chroot command's option of a process with a network of
// its own: -net OUTER:INNER, before ROOT.
const NetFlag = "-net"

// ownNet is a process's own network: the port it listens on there
// (inner) and the guest's port that leads to it (outer).
type ownNet struct{ outer, inner int }

func (n ownNet) String() string { return strconv.Itoa(n.outer) + ":" + strconv.Itoa(n.inner) }

func parseOwnNet(s string) (ownNet, error) {
	o, i, ok := strings.Cut(s, ":")
	outer, err1 := strconv.Atoi(o)
	inner, err2 := strconv.Atoi(i)
	if !ok || err1 != nil || err2 != nil || outer < 1 || outer > 65535 || inner < 1 || inner > 65535 {
		return ownNet{}, fmt.Errorf("%s %q: want OUTER:INNER, two ports", NetFlag, s)
	}
	return ownNet{outer, inner}, nil
}

// pairBlocks is how many /30 blocks the pairs take from 169.254.0.0/16:
// 169 blocks of 64, so that no pair is 169.254.169.254 (where clouds
// answer for metadata).
const pairBlocks = 169 * 64

// addrs are the guest's end of the pair and the process's.
func (n ownNet) addrs() (guest, inner netip.Addr) {
	i := n.outer % pairBlocks
	b := [4]byte{169, 254, byte(i / 64), byte(i%64*4 + 1)}
	guest = netip.AddrFrom4(b)
	return guest, guest.Next()
}

// link is the guest's end of the pair.
func (n ownNet) link() string { return "cw" + strconv.Itoa(n.outer) }

// pairNet is 169.254.0.0/16, where every pair's addresses are.
var pairNet = netip.MustParsePrefix("169.254.0.0/16")

// enterOwnNet listens on n.outer in the calling thread's network (the
// guest's), makes a network namespace for the process wired to it and
// leaves the calling thread there, locked to its goroutine, so that what
// it starts next runs in it. The listener relays to the process (relay).
func enterOwnNet(n ownNet) (net.Listener, error) {
	runtime.LockOSThread() // for good: this thread leaves the guest's network
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(n.outer))
	if err != nil {
		return nil, fmt.Errorf("listening on the guest's port %d for the image's port %d: %w", n.outer, n.inner, err)
	}
	fail := func(err error) (net.Listener, error) {
		ln.Close()
		return nil, err
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0); err != nil {
		return fail(fmt.Errorf("turning on forwarding in the guest, for the image's own network: %w", err))
	}
	if err := masquerade(); err != nil {
		return fail(fmt.Errorf("the guest's masquerade of the images' own networks: %w", err))
	}
	guestNS, err := netns.Get()
	if err != nil {
		return fail(err)
	}
	defer guestNS.Close()
	own, err := netns.New()
	if err != nil {
		return fail(fmt.Errorf("making a network namespace for the image's process: %w", err))
	}
	defer own.Close()
	if err := wire(n, guestNS, own); err != nil {
		return fail(err)
	}
	return ln, nil
}

// wire makes the veth pair between the guest's network and the
// process's, addresses both ends, and routes the process's traffic
// through the guest.
func wire(n ownNet, guestNS, own netns.NsHandle) error {
	hg, err := netlink.NewHandleAt(guestNS)
	if err != nil {
		return err
	}
	defer hg.Close()
	ho, err := netlink.NewHandleAt(own)
	if err != nil {
		return err
	}
	defer ho.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: n.link()}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(own))}
	err = hg.LinkAdd(veth)
	if errors.Is(err, os.ErrExist) {
		// Left by a process whose network had not ended yet: this
		// port's pair is the process's that holds the port now.
		if old, lerr := hg.LinkByName(n.link()); lerr == nil {
			hg.LinkDel(old)
		}
		err = hg.LinkAdd(veth)
	}
	if err != nil {
		return fmt.Errorf("making the veth pair %s of the image's network: %w", n.link(), err)
	}
	guest, inner := n.addrs()
	set := func(h *netlink.Handle, name string, addr netip.Addr) (netlink.Link, error) {
		l, err := h.LinkByName(name)
		if err != nil {
			return nil, err
		}
		if addr.IsValid() {
			a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(30, 32)}}
			if err := h.AddrAdd(l, a); err != nil {
				return nil, fmt.Errorf("addressing %s (%s): %w", name, addr, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("bringing %s up: %w", name, err)
		}
		return l, nil
	}
	if _, err := set(hg, n.link(), guest); err != nil {
		return err
	}
	if _, err := set(ho, "lo", netip.Addr{}); err != nil {
		return err
	}
	eth, err := set(ho, "eth0", inner)
	if err != nil {
		return err
	}
	if err := ho.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: guest.AsSlice()}); err != nil {
		return fmt.Errorf("routing the image's network through the guest: %w", err)
	}
	return nil
}

// masquerade makes the guest's network rewrite the source of what the
// pairs send out (to the guest's own address), once for every process.
func masquerade() error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "corpus_release"})
	ch := c.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	c.FlushChain(ch)
	mask := net.CIDRMask(pairNet.Bits(), 32)
	base := pairNet.Addr().AsSlice()
	in := func(offset uint32, op expr.CmpOp) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
			&expr.Cmp{Op: op, Register: 1, Data: base},
		}
	}
	// ip saddr 169.254.0.0/16 ip daddr != 169.254.0.0/16 masquerade
	exprs := append(in(12, expr.CmpOpEq), in(16, expr.CmpOpNeq)...)
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: append(exprs, &expr.Masq{})})
	return c.Flush()
}

// relay hands each connection to a listener to the process's port.
type relay struct {
	ln     net.Listener
	to     string
	served chan struct{}
	// back counts the copies from the process to its clients under way.
	back sync.WaitGroup
}

// startRelay relays what comes to ln to the process of n, until close.
func startRelay(ln net.Listener, n ownNet) *relay {
	_, inner := n.addrs()
	r := &relay{ln: ln, to: net.JoinHostPort(inner.String(), strconv.Itoa(n.inner)), served: make(chan struct{})}
	go r.serve()
	return r
}

func (r *relay) serve() {
	defer close(r.served)
	var delay time.Duration
	for {
		c, err := r.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off, as
			// net/http does, instead of spinning or giving up.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		delay = 0
		r.back.Add(1)
		go func() {
			defer c.Close()
			up, err := net.DialTimeout("tcp", r.to, 5*time.Second)
			if err != nil {
				r.back.Done()
				return // the client sees its connection closed
			}
			defer up.Close()
			pipe(c, up, r.back.Done)
		}()
	}
}

// close takes no more connections and, the process having ended, waits
// up to d for what it sent to reach its clients: a response written just
// before it exited is not cut short by this command's own exit.
func (r *relay) close(d time.Duration) {
	r.ln.Close()
	<-r.served
	done := make(chan struct{})
	go func() {
		r.back.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// pipe copies both ways between a client and the process until both
// sides ended; back is called once the process's side is copied to the
// client.
func pipe(client, proc net.Conn, back func()) {
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		defer back()
		tcprelay.CopyHalf(client, proc)
	}()
	tcprelay.CopyHalf(proc, client)
	<-copied
}
