package proxy

import (
	"crypto/tls"
	"net"
	"sync"
)

// handoffListener is the listener the net/http server of a listener
// serves: the lean HTTP/1.1 path hands it the connections it leaves to
// net/http (HTTP/2, upgrades, anything unusual), with what was read of
// them already.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept; connections handed over later are refused.
func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// handOver gives c to the server; false (c not taken) once it is closed.
func (l *handoffListener) handOver(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// prefixConn is a connection some bytes of which were read already: Read
// returns those first. tls is the state of a TLS connection underneath,
// for the handler to see (net/http sets Request.TLS only on a *tls.Conn).
type prefixConn struct {
	net.Conn
	prefix []byte
	tls    *tls.ConnectionState
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite lets net/http half-close the connection before closing it.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
