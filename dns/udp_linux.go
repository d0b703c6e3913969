package dns

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// batchSize is the number of packets read with one recvmmsg and answers
// sent with one sendmmsg.
const batchSize = 32

// oobSize holds the control messages a query comes with: IP_PKTINFO and
// IPV6_PKTINFO, both for IPv4 on a dual-stack socket.
const oobSize = 128

// udpSockets is the number of UDP sockets to bind for n wanted: SO_REUSEPORT
// lets them all have the address.
func udpSockets(n int) int { return n }

// udpIO reads and writes a socket's packets in batches: recvmmsg fills up
// to batchSize read slots, and the answers go out with sendmmsg, each to
// the source address its query left in its read slot. Every buffer is
// allocated once, so a batch costs no allocation.
type udpIO struct {
	rc      syscall.RawConn
	maxSize int // of an answer

	rhdrs [batchSize]unix.Mmsghdr
	riovs [batchSize]unix.Iovec
	names [batchSize][unix.SizeofSockaddrInet6]byte
	rbuf  []byte // batchSize slots of maxQuerySize
	roob  []byte // batchSize slots of oobSize
	nr    int    // packets read by the last recv

	whdrs [batchSize]unix.Mmsghdr
	wiovs [batchSize]unix.Iovec
	wbuf  []byte // batchSize slots of maxSize
	woob  []byte // batchSize slots of oobSize
	nw    int    // answers waiting in the write slots

	// The functions RawConn calls, made once: a closure made per call
	// would be allocated per call.
	recvFn, sendFn func(fd uintptr) bool
	sent           int // by the last sendmmsg
	errno          syscall.Errno
}

func (io *udpIO) init(conn *net.UDPConn, maxSize int) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	io.rc, io.maxSize = rc, maxSize
	io.rbuf = make([]byte, batchSize*maxQuerySize)
	io.roob = make([]byte, batchSize*oobSize)
	io.wbuf = make([]byte, batchSize*maxSize)
	io.woob = make([]byte, batchSize*oobSize)
	for i := range batchSize {
		io.riovs[i].Base = &io.rbuf[i*maxQuerySize]
		io.riovs[i].SetLen(maxQuerySize)
		io.rhdrs[i].Hdr.Iov = &io.riovs[i]
		io.rhdrs[i].Hdr.SetIovlen(1)
		io.rhdrs[i].Hdr.Name = &io.names[i][0]
		io.whdrs[i].Hdr.Iov = &io.wiovs[i]
		io.whdrs[i].Hdr.SetIovlen(1)
	}
	io.recvFn = func(fd uintptr) bool {
		for {
			n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&io.rhdrs[0])), batchSize, 0, 0, 0)
			switch errno {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // wait until readable
			}
			io.nr, io.errno = int(n), errno
			return true
		}
	}
	io.sendFn = func(fd uintptr) bool {
		for {
			n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&io.whdrs[io.sent])), uintptr(io.nw-io.sent), 0, 0, 0)
			switch errno {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // wait until writable
			}
			io.errno = errno
			if errno == 0 {
				io.sent += int(n)
			}
			return true
		}
	}
	return nil
}

// recv reads up to batchSize packets, waiting for the first; pktinfo asks
// for their destinations too.
func (io *udpIO) recv(pktinfo bool) error {
	for i := range batchSize {
		h := &io.rhdrs[i].Hdr
		h.Namelen = unix.SizeofSockaddrInet6
		h.Flags = 0
		if pktinfo {
			h.Control = &io.roob[i*oobSize]
			h.SetControllen(oobSize)
		}
	}
	io.nr, io.errno = 0, 0
	if err := io.rc.Read(io.recvFn); err != nil {
		return err
	}
	if io.errno != 0 {
		return io.errno
	}
	return nil
}

// packet returns read slot i: the packet, whether it was cut short, its
// source, and the control messages that came with it.
func (io *udpIO) packet(i int) (pkt []byte, cut bool, from netip.AddrPort, oob []byte) {
	h := &io.rhdrs[i]
	pkt = io.rbuf[i*maxQuerySize : i*maxQuerySize+int(h.Len)]
	cut = h.Hdr.Flags&unix.MSG_TRUNC != 0
	oob = io.roob[i*oobSize : i*oobSize+int(h.Hdr.Controllen)]
	return pkt, cut, sockaddrAddrPort(io.names[i][:h.Hdr.Namelen]), oob
}

// scope returns the IPv6 scope ID of the source of read slot i, 0 if none.
func (io *udpIO) scope(i int) uint32 {
	name := io.names[i][:io.rhdrs[i].Hdr.Namelen]
	if len(name) < unix.SizeofSockaddrInet6 || binary.NativeEndian.Uint16(name) != unix.AF_INET6 {
		return 0
	}
	return binary.NativeEndian.Uint32(name[24:])
}

// slot returns the empty buffer of the next write slot.
func (io *udpIO) slot() []byte {
	return io.wbuf[io.nw*io.maxSize : io.nw*io.maxSize : (io.nw+1)*io.maxSize]
}

// queue queues b, written in the next write slot, to the source of read
// slot i, sent from src when it is valid.
func (io *udpIO) queue(b []byte, i int, src netip.Addr) {
	h := &io.whdrs[io.nw].Hdr
	io.wiovs[io.nw].Base = &b[0]
	io.wiovs[io.nw].SetLen(len(b))
	h.Name = &io.names[i][0]
	h.Namelen = io.rhdrs[i].Hdr.Namelen
	h.Control = nil
	h.SetControllen(0)
	if src.IsValid() {
		oob := appendSrc(io.woob[io.nw*oobSize:io.nw*oobSize], src)
		h.Control = &oob[0]
		h.SetControllen(len(oob))
	}
	io.nw++
}

// flush sends the queued answers. An answer the kernel refuses is
// dropped, as a lost datagram would be; the error of the last one refused
// is returned.
func (io *udpIO) flush() error {
	var last error
	for io.sent = 0; io.sent < io.nw; {
		io.errno = 0
		if err := io.rc.Write(io.sendFn); err != nil {
			io.nw = 0
			return err
		}
		if io.errno != 0 {
			last = io.errno
			io.sent++ // skip the one refused
		}
	}
	io.nw = 0
	return last
}

// readBatch reads a batch of packets, answers those the fast path can and
// queues the others in u.pending.
func (u *udpSocket) readBatch() error {
	io := &u.io
	if err := io.recv(u.pktinfo); err != nil {
		return err
	}
	for i := range io.nr {
		pkt, cut, from, oob := io.packet(i)
		var dst netip.Addr
		if u.pktinfo {
			dst = parseDst(oob)
		}
		out, ok := u.answer(io.slot(), pkt, cut, from)
		switch {
		case !ok:
			if scope := io.scope(i); scope != 0 {
				from = netip.AddrPortFrom(from.Addr().WithZone(strconv.FormatUint(uint64(scope), 10)), from.Port())
			}
			u.hand(pkt, from, dst)
		case out != nil:
			io.queue(out, i, dst)
		}
	}
	if err := io.flush(); err != nil {
		u.s.log.Debug("writing answers", "err", err)
	}
	return nil
}

// sockaddrAddrPort returns the address and port of a struct sockaddr_in
// or sockaddr_in6 in b, without an IPv6 zone.
func sockaddrAddrPort(b []byte) netip.AddrPort {
	if len(b) < 2 {
		return netip.AddrPort{}
	}
	switch binary.NativeEndian.Uint16(b) {
	case unix.AF_INET:
		if len(b) >= 8 {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:]))
		}
	case unix.AF_INET6:
		if len(b) >= 24 {
			return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), binary.BigEndian.Uint16(b[2:]))
		}
	}
	return netip.AddrPort{}
}

// reusePort sets SO_REUSEPORT on a socket before it is bound: the kernel
// then spreads the packets sent to the address over the sockets that share
// it, by their source.
func reusePort(_, _ string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); cerr != nil {
		return cerr
	}
	return err
}

// enablePktinfo asks the kernel for the destination address of every
// packet read on conn, for IPv4 and IPv6; an error only when neither can
// be had.
func enablePktinfo(conn *net.UDPConn) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var err4, err6 error
	if cerr := rc.Control(func(fd uintptr) {
		err4 = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		err6 = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
	}); cerr != nil {
		return cerr
	}
	if err4 != nil && err6 != nil {
		return errors.Join(err4, err6)
	}
	return nil
}

// parseDst returns the destination address in the control messages oob,
// the IPv6 one first as miekg/dns does; unmapped, invalid if none.
func parseDst(oob []byte) netip.Addr {
	var dst4 netip.Addr
	for len(oob) >= unix.SizeofCmsghdr {
		var n int
		if unix.SizeofCmsghdr == 16 {
			n = int(binary.NativeEndian.Uint64(oob))
		} else {
			n = int(binary.NativeEndian.Uint32(oob))
		}
		if n < unix.SizeofCmsghdr || n > len(oob) {
			break
		}
		level := int32(binary.NativeEndian.Uint32(oob[unix.SizeofCmsghdr-8:]))
		typ := int32(binary.NativeEndian.Uint32(oob[unix.SizeofCmsghdr-4:]))
		data := oob[unix.SizeofCmsghdr:n]
		switch {
		case level == unix.IPPROTO_IPV6 && typ == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			return netip.AddrFrom16([16]byte(data[:16])).Unmap()
		case level == unix.IPPROTO_IP && typ == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			dst4 = netip.AddrFrom4([4]byte(data[8:12])) // ipi_addr
		}
		next := unix.CmsgSpace(n - unix.SizeofCmsghdr)
		if next > len(oob) {
			break
		}
		oob = oob[next:]
	}
	return dst4
}

// appendSrc appends to b the control message that sends a packet from
// src: IP_PKTINFO's ipi_spec_dst for IPv4, IPV6_PKTINFO for IPv6.
func appendSrc(b []byte, src netip.Addr) []byte {
	level, typ, size := unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unix.SizeofInet6Pktinfo
	if src.Is4() {
		level, typ, size = unix.IPPROTO_IP, unix.IP_PKTINFO, unix.SizeofInet4Pktinfo
	}
	start := len(b)
	if unix.SizeofCmsghdr == 16 {
		b = binary.NativeEndian.AppendUint64(b, uint64(unix.CmsgLen(size)))
	} else {
		b = binary.NativeEndian.AppendUint32(b, uint32(unix.CmsgLen(size)))
	}
	b = binary.NativeEndian.AppendUint32(b, uint32(level))
	b = binary.NativeEndian.AppendUint32(b, uint32(typ))
	if src.Is4() {
		a := src.As4()
		b = append(b, 0, 0, 0, 0) // ipi_ifindex
		b = append(b, a[:]...)    // ipi_spec_dst
		b = append(b, 0, 0, 0, 0) // ipi_addr
	} else {
		a := src.As16()
		b = append(b, a[:]...)    // ipi6_addr
		b = append(b, 0, 0, 0, 0) // ipi6_ifindex
	}
	for len(b)-start < unix.CmsgSpace(size) {
		b = append(b, 0)
	}
	return b
}
