// Package tcprelay copies a TCP connection to another, one direction at
// a time, passing each end of stream on as a half close: the proxy's TCP
// routes and the relay of an image's own network (the supervisor's) are
// both made of it.
package tcprelay

import (
	"io"
	"net"
)

// CopyHalf copies src to dst. At the source's end of stream it passes
// the half close on (CloseWrite), so the other direction can still
// finish; on an error it closes both sides, which ends the other
// direction too.
func CopyHalf(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	dst.Close()
}
