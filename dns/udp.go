package dns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/miekg/dns"
)

// udpSocket is one of the server's UDP sockets, as the miekg/dns server
// that serves it sees it. Its reader goroutine (that server's read loop)
// answers what the fast path can right where it reads, batches of packets
// at a time where the system allows (see readBatch), and hands the rest on
// to the full path with a copy of each packet. It is a net.PacketConn
// rather than a *net.UDPConn so that miekg/dns reads it through
// ReadPacketConn and writes the full path's answers through WriteTo.
type udpSocket struct {
	*net.UDPConn
	s *Server
	// pktinfo says the socket is bound to an unspecified address: every
	// answer must leave from the address its query was sent to, which the
	// kernel reports with each packet.
	pktinfo bool

	// Owned by the reader goroutine.
	io      udpIO
	q       wireQuery
	pending []slowPacket // read, for the full path, from head on
	head    int
}

// slowPacket is a packet for the full path, copied out of the read buffers.
type slowPacket struct {
	pkt  []byte
	from *udpPeer
}

var (
	_ net.PacketConn       = (*udpSocket)(nil)
	_ dns.PacketConnReader = udpReader{}
)

func newUDPSocket(s *Server, conn *net.UDPConn) (*udpSocket, error) {
	u := &udpSocket{UDPConn: conn, s: s}
	if local, ok := conn.LocalAddr().(*net.UDPAddr); ok && local.IP.IsUnspecified() {
		switch err := enablePktinfo(conn); {
		case errors.Is(err, errors.ErrUnsupported):
			// The kernel picks the source of every answer.
		case err != nil:
			return nil, fmt.Errorf("asking for packet destinations on %s: %w", local, err)
		default:
			u.pktinfo = true
		}
	}
	if err := u.io.init(conn, int(s.cfg.MaxUDPSize)); err != nil {
		return nil, fmt.Errorf("udp socket %s: %w", conn.LocalAddr(), err)
	}
	return u, nil
}

// udpReader is the dns.Reader of one udpSocket's server.
type udpReader struct {
	dns.Reader
	u *udpSocket
}

// ReadPacketConn implements dns.PacketConnReader: it returns the next
// packet the fast path did not answer, in a buffer the caller owns, with
// its source as a *udpPeer. The timeout is not used: Shutdown unblocks
// the read by setting a deadline in the past.
func (r udpReader) ReadPacketConn(net.PacketConn, time.Duration) ([]byte, net.Addr, error) {
	return r.u.next()
}

// next reads packets and answers them until one needs the full path.
func (u *udpSocket) next() ([]byte, net.Addr, error) {
	for u.head == len(u.pending) {
		u.pending, u.head = u.pending[:0], 0
		if err := u.readBatch(); err != nil {
			return nil, nil, err
		}
	}
	p := u.pending[u.head]
	u.pending[u.head] = slowPacket{}
	u.head++
	return p.pkt, p.from, nil
}

// answer answers the packet pkt from from into out if the fast path can,
// and returns the answer (nil for none: a rate-limited drop) and true.
// Otherwise, or when the packet was cut short (the full path decides what
// to make of it), it returns false.
func (u *udpSocket) answer(out, pkt []byte, cut bool, from netip.AddrPort) ([]byte, bool) {
	if cut || !u.q.parse(pkt) {
		return nil, false
	}
	return u.s.fastAnswer(out, &u.q, from.Addr().Unmap())
}

// hand queues a copy of pkt, from from and sent to dst, for the full path.
func (u *udpSocket) hand(pkt []byte, from netip.AddrPort, dst netip.Addr) {
	u.pending = append(u.pending, slowPacket{pkt: bytes.Clone(pkt), from: &udpPeer{AddrPort: from, dst: dst}})
}

// WriteTo implements net.PacketConn for the full path's answers: addr is
// the *udpPeer the query came with.
func (u *udpSocket) WriteTo(b []byte, addr net.Addr) (int, error) {
	p, ok := addr.(*udpPeer)
	if !ok {
		return 0, errors.New("writing to an address the socket did not read")
	}
	var oob []byte
	if u.pktinfo && p.dst.IsValid() {
		oob = appendSrc(nil, p.dst)
	}
	n, _, err := u.WriteMsgUDPAddrPort(b, oob, p.AddrPort)
	return n, err
}

// udpPeer is the source of a UDP query, and the address it was sent to
// when the socket is bound to an unspecified address.
type udpPeer struct {
	netip.AddrPort
	dst netip.Addr
}

// Network implements net.Addr.
func (*udpPeer) Network() string { return "udp" }

// listenUDP binds n UDP sockets to addr, sharing it with SO_REUSEPORT when
// n > 1.
func listenUDP(addr string, n int) ([]*net.UDPConn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	lc := net.ListenConfig{}
	if n > 1 {
		lc.Control = reusePort
	}
	var conns []*net.UDPConn
	for range n {
		pc, err := lc.ListenPacket(context.Background(), "udp", addr)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, err
		}
		conns = append(conns, pc.(*net.UDPConn))
		// The next sockets bind the port the first one got.
		addr = net.JoinHostPort(host, strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port))
	}
	return conns, nil
}
