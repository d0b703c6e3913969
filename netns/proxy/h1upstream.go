package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"corpus/netns/proxy/h1"
)

// upstreamIdleTimeout closes a keep-alive connection to a target idle this
// long (as the net/http Transport's IdleConnTimeout did).
const upstreamIdleTimeout = 90 * time.Second

// upstreamConn is one keep-alive connection of the lean path to a target.
// One exchange at a time owns it; idle, it sits in its pool.
type upstreamConn struct {
	c      net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	pool   *upstreamPool
	reused bool      // it has served an exchange before
	idleAt time.Time // when it went back to the pool
}

// close closes the connection and releases its buffers.
func (uc *upstreamConn) close() {
	uc.c.Close()
	putReader(uc.br)
	putWriter(uc.bw)
	uc.br, uc.bw = nil, nil
}

// upstreamPool holds the idle connections to one target, most recently
// used on top.
type upstreamPool struct {
	target string
	max    int

	mu   sync.Mutex
	idle []*upstreamConn
}

// get takes the most recently used idle connection, nil if there is none.
// Connections idle too long are closed.
func (pl *upstreamPool) get(now time.Time) *upstreamConn {
	pl.mu.Lock()
	n := len(pl.idle)
	if n == 0 {
		pl.mu.Unlock()
		return nil
	}
	uc := pl.idle[n-1]
	pl.idle[n-1] = nil
	pl.idle = pl.idle[:n-1]
	if now.Sub(uc.idleAt) < upstreamIdleTimeout {
		pl.mu.Unlock()
		return uc
	}
	// This one and those below it are stale.
	stale := append([]*upstreamConn{uc}, pl.idle...)
	clear(pl.idle)
	pl.idle = pl.idle[:0]
	pl.mu.Unlock()
	for _, s := range stale {
		s.close()
	}
	return nil
}

// put returns a connection after a complete exchange; past the pool's size
// it is closed.
func (pl *upstreamPool) put(uc *upstreamConn, now time.Time) {
	uc.reused = true
	uc.idleAt = now
	pl.mu.Lock()
	if len(pl.idle) < pl.max {
		pl.idle = append(pl.idle, uc)
		pl.mu.Unlock()
		return
	}
	pl.mu.Unlock()
	uc.close()
}

// closeIdle closes the idle connections that went idle before cutoff (all
// of them for the zero time... and any time after now).
func (pl *upstreamPool) closeIdle(cutoff time.Time) {
	pl.mu.Lock()
	var stale []*upstreamConn
	keep := pl.idle[:0]
	for _, uc := range pl.idle {
		if uc.idleAt.Before(cutoff) {
			stale = append(stale, uc)
		} else {
			keep = append(keep, uc)
		}
	}
	clear(pl.idle[len(keep):])
	pl.idle = keep
	pl.mu.Unlock()
	for _, uc := range stale {
		uc.close()
	}
}

// upstreams are the lean path's connection pools, one per target, kept for
// the life of the proxy (a target's pool empties itself once idle).
type upstreams struct {
	dialer net.Dialer
	max    int
	pools  sync.Map // target → *upstreamPool
}

// pool returns the pool of target, made on first use.
func (u *upstreams) pool(target string) *upstreamPool {
	if pl, ok := u.pools.Load(target); ok {
		return pl.(*upstreamPool)
	}
	pl, _ := u.pools.LoadOrStore(target, &upstreamPool{target: target, max: u.max})
	return pl.(*upstreamPool)
}

// closeIdle closes the idle connections of every pool that went idle
// before cutoff.
func (u *upstreams) closeIdle(cutoff time.Time) {
	u.pools.Range(func(_, v any) bool {
		v.(*upstreamPool).closeIdle(cutoff)
		return true
	})
}

// dial opens a new connection to the pool's target.
func (u *upstreams) dial(ctx context.Context, pl *upstreamPool) (*upstreamConn, error) {
	c, err := u.dialer.DialContext(ctx, "tcp", pl.target)
	if err != nil {
		return nil, err
	}
	return &upstreamConn{c: c, br: getReader(c), bw: getWriter(c), pool: pl}, nil
}

// connect returns a connection to the pool's target: an idle one, or a new
// one. With mustBeLive (a request that cannot be sent twice), an idle
// connection the target already closed is not used.
func (u *upstreams) connect(ctx context.Context, pl *upstreamPool, mustBeLive bool) (*upstreamConn, error) {
	for {
		uc := pl.get(time.Now())
		if uc == nil {
			return u.dial(ctx, pl)
		}
		if !mustBeLive {
			return uc, nil
		}
		uc.c.SetReadDeadline(time.Time{}) // a past one would fail the peek
		if connAlive(uc.c) {
			return uc, nil
		}
		uc.close()
	}
}

var (
	readerPool sync.Pool
	writerPool sync.Pool
)

// The lean path's buffers: 4 KiB each way per connection, as net/http's.
const h1BufSize = 4 << 10

func getReader(r io.Reader) *bufio.Reader {
	if br, ok := readerPool.Get().(*bufio.Reader); ok {
		br.Reset(r)
		return br
	}
	return bufio.NewReaderSize(r, h1BufSize)
}

func putReader(br *bufio.Reader) {
	if br != nil {
		br.Reset(nil)
		readerPool.Put(br)
	}
}

func getWriter(w io.Writer) *bufio.Writer {
	if bw, ok := writerPool.Get().(*bufio.Writer); ok {
		bw.Reset(w)
		return bw
	}
	return bufio.NewWriterSize(w, h1BufSize)
}

func putWriter(bw *bufio.Writer) {
	if bw != nil {
		bw.Reset(nil)
		writerPool.Put(bw)
	}
}

// errBadChunk means a chunked body is malformed.
var errBadChunk = errors.New("malformed chunked body")

// bodyCopy copies one message body from a buffered source to a buffered
// destination. dst is flushed before every read of src that may block, so a
// slow body (server-sent events, a streamed upload) streams through while
// a body already at hand goes out with its head in one write. Once src's
// buffer is empty a large remainder is copied connection to connection
// (splice(2) between TCP sockets).
type bodyCopy struct {
	src     *bufio.Reader
	srcConn net.Conn
	dst     *bufio.Writer
	dstConn net.Conn
	// srcFailed tells a failed copy's reading end failed (or the body
	// ended too soon), not its writing end.
	srcFailed bool
}

// srcErr records a failure of the reading end.
func (b *bodyCopy) srcErr(err error) error {
	b.srcFailed = true
	return err
}

// copyN copies n bytes.
func (b *bodyCopy) copyN(n int64) error {
	for n > 0 {
		if b.src.Buffered() == 0 {
			if err := b.dst.Flush(); err != nil {
				return err
			}
			if n >= 32<<10 {
				return b.direct(n)
			}
			if _, err := b.src.Peek(1); err != nil {
				return b.srcErr(noEOF(err))
			}
		}
		k := min(int64(b.src.Buffered()), n)
		p, _ := b.src.Peek(int(k))
		if _, err := b.dst.Write(p); err != nil {
			return err
		}
		b.src.Discard(int(k))
		n -= int64(k)
	}
	return nil
}

// toEOF copies until src ends (a body delimited by the connection's end).
func (b *bodyCopy) toEOF() error {
	for {
		if b.src.Buffered() == 0 {
			if err := b.dst.Flush(); err != nil {
				return err
			}
			if _, err := b.src.Peek(1); err != nil {
				if err == io.EOF {
					return nil
				}
				return b.srcErr(err)
			}
		}
		p, _ := b.src.Peek(b.src.Buffered())
		if _, err := b.dst.Write(p); err != nil {
			return err
		}
		b.src.Discard(len(p))
	}
}

// chunked copies a chunked body as it is, chunk sizes, extensions and
// trailers included, to its terminating empty line.
func (b *bodyCopy) chunked() error {
	for {
		line, err := b.line()
		if err != nil {
			return err
		}
		size, ok := chunkSize(line)
		if !ok {
			return b.srcErr(errBadChunk)
		}
		if _, err := b.dst.Write(line); err != nil {
			return err
		}
		if size == 0 {
			break
		}
		if err := b.copyN(size); err != nil {
			return err
		}
		line, err = b.line()
		if err != nil {
			return err
		}
		if string(line) != "\r\n" {
			return b.srcErr(errBadChunk)
		}
		b.dst.Write(line)
	}
	for { // trailers, then the empty line
		line, err := b.line()
		if err != nil {
			return err
		}
		if _, err := b.dst.Write(line); err != nil {
			return err
		}
		if string(line) == "\r\n" {
			return nil
		}
	}
}

// line reads one line (with its CRLF) of chunk framing, at most a buffer
// long; the slice holds until the next read of src.
func (b *bodyCopy) line() ([]byte, error) {
	if b.src.Buffered() == 0 {
		if err := b.dst.Flush(); err != nil {
			return nil, err
		}
	}
	line, err := b.src.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, b.srcErr(errBadChunk)
	}
	if err != nil {
		return nil, b.srcErr(noEOF(err))
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, b.srcErr(errBadChunk)
	}
	return line, nil
}

// chunkSize parses a chunk-size line (hex size, optional extensions, CRLF).
func chunkSize(line []byte) (int64, bool) {
	line = line[:len(line)-2]
	var n int64
	i := 0
	for ; i < len(line); i++ {
		c := line[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			goto ext
		}
		if i >= 15 {
			return 0, false
		}
		n = n<<4 | int64(d)
	}
ext:
	if i == 0 {
		return 0, false
	}
	if rest := h1.TrimOWS(line[i:]); len(rest) > 0 && rest[0] != ';' {
		return 0, false
	}
	return n, true
}

// direct copies n bytes from srcConn to dstConn, both buffers being empty:
// by splice(2) between two TCP connections, else through a pooled buffer.
func (b *bodyCopy) direct(n int64) error {
	if dst, ok := b.dstConn.(*net.TCPConn); ok {
		if _, ok := b.srcConn.(*net.TCPConn); ok {
			got, err := dst.ReadFrom(&io.LimitedReader{R: b.srcConn, N: n})
			if err == nil && got < n {
				err = b.srcErr(io.ErrUnexpectedEOF)
			}
			return err
		}
	}
	buf := bufPool.Get()
	defer bufPool.Put(buf)
	for n > 0 {
		k, err := b.srcConn.Read(buf[:min(int64(len(buf)), n)])
		if k > 0 {
			if _, werr := b.dstConn.Write(buf[:k]); werr != nil {
				return werr
			}
			n -= int64(k)
		}
		if err != nil {
			if n > 0 {
				return b.srcErr(noEOF(err))
			}
			return nil
		}
	}
	return nil
}

// noEOF turns the end of a connection in the middle of a body into
// io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
