package h1

import (
	"bytes"
)

// Request is the head of one request read by the proxy's lean HTTP/1.1
// path. Its slices point into the connection's head buffer and hold
// until the next request is read.
type Request struct {
	Method []byte
	Host   []byte // the Host header, as sent
	Path   []byte // the request target's path (no query)
	Length int64  // Content-Length, -1 when there is none
	// Chunked means Transfer-Encoding: chunked (and no Content-Length).
	Chunked bool
	// Close means the client asked for the connection to be closed after
	// this exchange.
	Close bool
	// The forwarding headers the client sent: X-Forwarded-For values in
	// order, the first X-Forwarded-Proto and -Host values (nil if none).
	XFF      [][]byte
	XFP, XFH []byte
	// TETrailers means the client sent TE: trailers (kept, as
	// httputil.ReverseProxy keeps it).
	TETrailers bool
	// Out is the request line and the header lines sent on to the target,
	// without the forwarding headers and the final empty line.
	Out []byte
}

// Reset empties r for the next request, keeping its buffers.
func (r *Request) Reset() {
	*r = Request{Length: -1, XFF: r.XFF[:0], Out: r.Out[:0]}
}

// HasBody reports whether a body follows the head.
func (r *Request) HasBody() bool { return r.Chunked || r.Length > 0 }

// Retryable reports whether the request may be sent again to another target
// or on a new connection after a failure before any answer: no body and an
// idempotent method (as failoverTransport decides).
func (r *Request) Retryable() bool {
	if r.HasBody() {
		return false
	}
	switch string(r.Method) {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}

func (r *Request) IsHead() bool { return string(r.Method) == "HEAD" }

// Header names the lean path treats specially.
const (
	hOther = iota
	hHost
	hContentLength
	hTransferEncoding
	hConnection
	hHop // hop-by-hop, dropped: Keep-Alive, Proxy-Connection, Proxy-Authenticate, Proxy-Authorization
	hTE
	hUpgrade
	hExpect
	hXFF
	hXFP
	hXFH
	hForwarded
	hHTTP2Settings
	hDate
	hTrailer
)

// headerKind classifies a header name (case-insensitively).
func headerKind(name []byte) int {
	switch len(name) {
	case 2:
		if EqualFold(name, "te") {
			return hTE
		}
	case 4:
		if EqualFold(name, "host") {
			return hHost
		}
		if EqualFold(name, "date") {
			return hDate
		}
	case 6:
		if EqualFold(name, "expect") {
			return hExpect
		}
	case 7:
		if EqualFold(name, "upgrade") {
			return hUpgrade
		}
		if EqualFold(name, "trailer") {
			return hTrailer
		}
	case 9:
		if EqualFold(name, "forwarded") {
			return hForwarded
		}
	case 10:
		if EqualFold(name, "connection") {
			return hConnection
		}
		if EqualFold(name, "keep-alive") {
			return hHop
		}
	case 14:
		if EqualFold(name, "content-length") {
			return hContentLength
		}
		if EqualFold(name, "http2-settings") {
			return hHTTP2Settings
		}
	case 15:
		if EqualFold(name, "x-forwarded-for") {
			return hXFF
		}
	case 16:
		if EqualFold(name, "x-forwarded-host") {
			return hXFH
		}
		if EqualFold(name, "proxy-connection") {
			return hHop
		}
	case 17:
		if EqualFold(name, "transfer-encoding") {
			return hTransferEncoding
		}
		if EqualFold(name, "x-forwarded-proto") {
			return hXFP
		}
	case 18:
		if EqualFold(name, "proxy-authenticate") {
			return hHop
		}
	case 19:
		if EqualFold(name, "proxy-authorization") {
			return hHop
		}
	}
	return hOther
}

// EqualFold reports whether b equals the lowercase ASCII s, ignoring case.
func EqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// CutLine splits b after its first CRLF: the line without it and the rest.
// ok is false when there is no CRLF, or a bare LF comes first.
func CutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	return b[:i-1], b[i+1:], true
}

// ParseRequest parses a request head (ending with an empty line) into r.
// It returns false for anything the lean path leaves to net/http: another
// protocol version, a request target that is not a plain path, an upgrade,
// Expect, header lines it does not fully understand (obsolete folding, bad
// characters, repeated or conflicting framing headers, Connection naming
// other headers), and a missing Host. net/http then serves the request, or
// answers 400 if it is malformed.
func ParseRequest(head []byte, r *Request) bool {
	r.Reset()
	line, rest, ok := CutLine(head)
	if !ok {
		return false
	}
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 || !isToken(line[:sp]) {
		return false
	}
	r.Method = line[:sp]
	target := line[sp+1:]
	sp = bytes.IndexByte(target, ' ')
	if sp <= 0 || string(target[sp+1:]) != "HTTP/1.1" {
		return false
	}
	target = target[:sp]
	if target[0] != '/' || !validRequestTarget(target) {
		return false
	}
	r.Path = target
	if q := bytes.IndexByte(target, '?'); q >= 0 {
		r.Path = target[:q]
	}
	if string(r.Method) == "PRI" || string(r.Method) == "CONNECT" {
		return false
	}
	r.Out = append(r.Out, line...)
	r.Out = append(r.Out, "\r\n"...)

	haveHost, haveCL := false, false
	for {
		line, rest, ok = CutLine(rest)
		if !ok {
			return false
		}
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return false // also obsolete line folding: a leading space
		}
		name, value := line[:colon], TrimOWS(line[colon+1:])
		if !validValue(value) {
			return false
		}
		switch headerKind(name) {
		case hHost:
			if haveHost || !validHostValue(value) {
				return false
			}
			haveHost = true
			r.Host = value
		case hContentLength:
			if haveCL || r.Chunked {
				return false
			}
			haveCL = true
			if r.Length = ParseLength(value); r.Length < 0 {
				return false
			}
		case hTransferEncoding:
			if haveCL || r.Chunked || !EqualFold(value, "chunked") {
				return false
			}
			r.Chunked = true
		case hConnection:
			if !connectionTokens(value, &r.Close) {
				return false
			}
			continue
		case hTE:
			if !EqualFold(value, "trailers") {
				return false
			}
			r.TETrailers = true
			continue
		case hUpgrade, hExpect, hHTTP2Settings:
			return false
		case hXFF:
			r.XFF = append(r.XFF, value)
			continue
		case hXFP:
			if r.XFP == nil {
				r.XFP = value
			}
			continue
		case hXFH:
			if r.XFH == nil {
				r.XFH = value
			}
			continue
		case hForwarded, hHop:
			continue
		}
		r.Out = append(r.Out, line...)
		r.Out = append(r.Out, "\r\n"...)
	}
	if !haveHost {
		return false
	}
	if r.TETrailers {
		r.Out = append(r.Out, "Te: trailers\r\n"...)
	}
	return true
}

// connectionTokens reads a Connection header value: only close and
// keep-alive are understood (close sets *close); another token names a
// header to drop, which the lean path leaves to net/http.
func connectionTokens(v []byte, close *bool) bool {
	for len(v) > 0 {
		var tok []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = TrimOWS(v[:i]), v[i+1:]
		} else {
			tok, v = TrimOWS(v), nil
		}
		switch {
		case len(tok) == 0:
		case EqualFold(tok, "close"):
			*close = true
		case EqualFold(tok, "keep-alive"):
		default:
			return false
		}
	}
	return true
}

// ParseLength parses a Content-Length value: decimal digits only; -1 when
// it is not one.
func ParseLength(v []byte) int64 {
	if len(v) == 0 || len(v) > 18 {
		return -1
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

func TrimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// Character classes, by byte.
const (
	cToken   = 1 << iota // RFC 9110 tchar
	cPath                // left as is in a path by net/url (EscapedPath)
	cValue               // allowed in a header value: not a control, or HT
	cHost                // in a host name, an IP literal or a port
	cQuery               // in a query: visible ASCII and above
	cHexChar             // 0-9 a-f A-F
)

var charClass = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		alnum := 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
		if alnum || bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), b) >= 0 {
			t[c] |= cToken
		}
		if alnum || bytes.IndexByte([]byte("-._~!$&'()*+,;=:@[]%/"), b) >= 0 {
			t[c] |= cPath
		}
		if b >= 0x20 && b != 0x7f || b == '\t' {
			t[c] |= cValue
		}
		if alnum || bytes.IndexByte([]byte("-._:[]"), b) >= 0 {
			t[c] |= cHost
		}
		if b > 0x20 && b != 0x7f {
			t[c] |= cQuery
		}
		if '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F' {
			t[c] |= cHexChar
		}
	}
	return t
}()

func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if charClass[c]&cToken == 0 {
			return false
		}
	}
	return true
}

func validValue(b []byte) bool {
	for _, c := range b {
		if charClass[c]&cValue == 0 {
			return false
		}
	}
	return true
}

// validHostValue accepts the Host values the lean path routes: names, IP
// literals and a port. Anything else goes to net/http, which judges it.
func validHostValue(b []byte) bool {
	for _, c := range b {
		if charClass[c]&cHost == 0 {
			return false
		}
	}
	return true
}

// validRequestTarget accepts an origin-form request target that net/http would
// send on unchanged: a path of characters net/url leaves as they are, with
// well-formed %-escapes, and a query without spaces or controls.
func validRequestTarget(b []byte) bool {
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '?':
			for _, c := range b[i+1:] {
				if charClass[c]&cQuery == 0 {
					return false
				}
			}
			return true
		case c == '%':
			if i+2 >= len(b) || charClass[b[i+1]]&cHexChar == 0 || charClass[b[i+2]]&cHexChar == 0 {
				return false
			}
		case charClass[c]&cPath == 0:
			return false
		}
	}
	return true
}

// AppendHostKey appends the route key of a Host value to dst, as the
// proxy's matchHost makes it: the port dropped, lowercase, no trailing
// dot.
func AppendHostKey(dst, h []byte) []byte {
	if i := bytes.LastIndexByte(h, ':'); i >= 0 {
		if h[0] == '[' {
			if j := bytes.LastIndexByte(h, ']'); j >= 0 {
				h = h[1:j]
			}
		} else if bytes.IndexByte(h, ':') == i {
			h = h[:i]
		}
	}
	if n := len(h); n > 0 && h[n-1] == '.' {
		h = h[:n-1]
	}
	for _, c := range h {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// Response is the head of a target's answer, parsed by ParseResponse.
// Its slices point into the head buffer.
type Response struct {
	Status  int
	Reason  []byte
	HTTP10  bool
	Length  int64 // -1: none
	Chunked bool
	Close   bool // the target closes the connection after this answer
	HasDate bool
	// Conn lists the header names the Connection header named (dropped).
	Conn [][]byte
}

// ParseResponse parses a target's response head; false means it is
// malformed (the client gets 502).
func ParseResponse(head []byte, r *Response) bool {
	*r = Response{Length: -1, Conn: r.Conn[:0]}
	line, rest, ok := CutLine(head)
	if !ok || len(line) < 12 || line[8] != ' ' {
		return false
	}
	switch string(line[:8]) {
	case "HTTP/1.1":
	case "HTTP/1.0":
		r.HTTP10, r.Close = true, true
	default:
		return false
	}
	code := line[9:12]
	for _, c := range code {
		if c < '0' || c > '9' {
			return false
		}
	}
	r.Status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	if r.Status < 100 {
		return false
	}
	if len(line) > 12 {
		if line[12] != ' ' {
			return false
		}
		r.Reason = line[13:]
	}
	haveCL := false
	for {
		line, rest, ok = CutLine(rest)
		if !ok {
			return false
		}
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return false
		}
		value := TrimOWS(line[colon+1:])
		if !validValue(value) {
			return false
		}
		switch headerKind(line[:colon]) {
		case hContentLength:
			n := ParseLength(value)
			if n < 0 || haveCL && n != r.Length {
				return false
			}
			haveCL, r.Length = true, n
		case hTransferEncoding:
			if !EqualFold(value, "chunked") {
				return false
			}
			r.Chunked = true
		case hConnection:
			for _, tok := range bytes.Split(value, []byte(",")) {
				tok = TrimOWS(tok)
				switch {
				case EqualFold(tok, "close"):
					r.Close = true
				case EqualFold(tok, "keep-alive"):
					if r.HTTP10 {
						r.Close = false
					}
				case len(tok) > 0:
					r.Conn = append(r.Conn, tok)
				}
			}
		case hDate:
			r.HasDate = true
		}
	}
	if r.Chunked {
		r.Length = -1
	}
	return true
}

// NoBody reports whether the answer has no body whatever its headers say:
// to HEAD, 1xx, 204 and 304.
func (r *Response) NoBody(head bool) bool {
	return head || r.Status < 200 || r.Status == 204 || r.Status == 304
}

// KeepHeader reports whether a header line of the target's answer goes on
// to the client: hop-by-hop headers and those the Connection header named
// stop at the proxy; Transfer-Encoding and Content-Length are written anew.
func (r *Response) KeepHeader(name []byte) bool {
	switch headerKind(name) {
	case hConnection, hHop, hTE, hUpgrade, hTransferEncoding, hContentLength:
		return false
	}
	for _, n := range r.Conn {
		if bytes.EqualFold(n, name) {
			return false
		}
	}
	return true
}
