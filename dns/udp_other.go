//go:build !linux

package dns

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
)

// udpSockets is one: without SO_REUSEPORT only one socket has the address.
func udpSockets(int) int { return 1 }

// reusePort is not used with a single socket.
func reusePort(_, _ string, _ syscall.RawConn) error { return errors.ErrUnsupported }

// enablePktinfo is not supported: on an unspecified address the kernel
// picks the source of every answer.
func enablePktinfo(*net.UDPConn) error { return errors.ErrUnsupported }

// udpIO reads one packet at a time.
type udpIO struct {
	conn *net.UDPConn
	buf  []byte
	out  []byte
}

func (io *udpIO) init(conn *net.UDPConn, maxSize int) error {
	io.conn, io.buf, io.out = conn, make([]byte, maxQuerySize), make([]byte, 0, maxSize)
	return nil
}

// readBatch reads a packet and answers it if the fast path can, or queues
// it in u.pending.
func (u *udpSocket) readBatch() error {
	n, from, err := u.io.conn.ReadFromUDPAddrPort(u.io.buf)
	if err != nil {
		return err
	}
	pkt := u.io.buf[:n]
	out, ok := u.answer(u.io.out[:0], pkt, n == len(u.io.buf), from)
	switch {
	case !ok:
		u.hand(pkt, from, netip.Addr{})
	case out != nil:
		if _, err := u.io.conn.WriteToUDPAddrPort(out, from); err != nil {
			u.s.log.Debug("writing answer", "remote", from.String(), "err", err)
		}
	}
	return nil
}

func appendSrc(b []byte, _ netip.Addr) []byte { return b }
