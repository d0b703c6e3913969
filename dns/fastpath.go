package dns

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// Header bits the fast path reads or writes.
const (
	bitQR = 1 << 15
	bitTC = 1 << 9
	bitRD = 1 << 8
	bitCD = 1 << 4
)

// optLen is the length of the OPT record the server adds to an answer:
// root name, type, class (payload size), TTL (flags) and an empty rdata.
const optLen = 11

// wireQuery is what the fast path reads from a UDP query. A reader goroutine
// owns one and reuses it for every packet.
type wireQuery struct {
	pkt   []byte
	id    uint16
	bits  uint16 // the RD and CD bits of the query
	name  []byte // the question name as sent, in pkt
	lower []byte // the question name in lowercase, in lowerBuf
	qtype uint16
	qend  int // offset just past the question
	edns  bool
	do    bool
	size  uint16 // the EDNS0 payload size
	// starts marks the offsets in name where a label starts.
	starts   [256 / 64]uint64
	lowerBuf [255]byte
}

// parse reads pkt into q. It returns false for anything but a plain query:
// one question of class IN with a name made of labels (no compression),
// no answer or authority records, and nothing in the additional section
// but an EDNS0 version 0 OPT record whose options the full path parses
// without fail (none, NSID, cookie, padding). Trailing bytes also send a
// packet to the full path.
func (q *wireQuery) parse(pkt []byte) bool {
	if len(pkt) < headerSize {
		return false
	}
	flags := binary.BigEndian.Uint16(pkt[2:])
	if flags&bitQR != 0 || (flags>>11)&0xf != dns.OpcodeQuery ||
		binary.BigEndian.Uint16(pkt[4:]) != 1 || binary.BigEndian.Uint16(pkt[6:]) != 0 ||
		binary.BigEndian.Uint16(pkt[8:]) != 0 {
		return false
	}
	arcount := binary.BigEndian.Uint16(pkt[10:])
	if arcount > 1 {
		return false
	}
	q.pkt, q.id, q.bits = pkt, binary.BigEndian.Uint16(pkt), flags&(bitRD|bitCD)
	q.starts = [4]uint64{}
	off := headerSize
	for {
		if off >= len(pkt) || off-headerSize >= 255 {
			return false
		}
		l := int(pkt[off])
		q.starts[(off-headerSize)/64] |= 1 << ((off - headerSize) % 64)
		if l == 0 {
			off++
			break
		}
		if l > 63 {
			return false
		}
		off += 1 + l
	}
	if off-headerSize > 255 || off+4 > len(pkt) {
		return false
	}
	q.name = pkt[headerSize:off]
	lower := q.lowerBuf[:len(q.name)]
	for i, c := range q.name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	q.lower = lower
	q.qtype = binary.BigEndian.Uint16(pkt[off:])
	if binary.BigEndian.Uint16(pkt[off+2:]) != dns.ClassINET {
		return false
	}
	off += 4
	q.qend = off
	q.edns, q.do, q.size = false, false, 0
	if arcount == 0 {
		return off == len(pkt)
	}
	// The OPT record: root name, type, class, TTL, rdata length, options.
	if off+optLen > len(pkt) || pkt[off] != 0 || binary.BigEndian.Uint16(pkt[off+1:]) != dns.TypeOPT {
		return false
	}
	q.edns = true
	q.size = binary.BigEndian.Uint16(pkt[off+3:])
	if pkt[off+6] != 0 { // version
		return false
	}
	q.do = pkt[off+7]&0x80 != 0
	end := off + optLen + int(binary.BigEndian.Uint16(pkt[off+9:]))
	if end != len(pkt) {
		return false
	}
	for off += optLen; off < end; {
		if off+4 > end {
			return false
		}
		switch binary.BigEndian.Uint16(pkt[off:]) {
		case dns.EDNS0NSID, dns.EDNS0COOKIE, dns.EDNS0PADDING:
		default:
			return false
		}
		off += 4 + int(binary.BigEndian.Uint16(pkt[off+2:]))
	}
	return off == end
}

// labelStart reports whether a label of q's name starts at off.
func (q *wireQuery) labelStart(off int) bool {
	return q.starts[off/64]&(1<<(off%64)) != 0
}

// lookup returns the template answering q and how much longer q's name is
// than the name the template was built for, or nil when q needs the full
// path.
func (t *answerTable) lookup(q *wireQuery) (*template, int) {
	switch q.qtype {
	case dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeOPT, dns.TypeTSIG, dns.TypeMAILA, dns.TypeMAILB:
		return nil, 0
	}
	if na := t.names[string(q.lower)]; na != nil {
		tm := na.other
		for _, tt := range na.types {
			if tt.qtype == q.qtype {
				tm = tt.t
				break
			}
		}
		if tm == nil || !tm.caseSafe && string(q.name) != string(q.lower) {
			return nil, 0
		}
		return tm, 0
	}
	// A name the zone does not have: NXDOMAIN if it is inside the zone,
	// spelled there as the origin is, and compresses as nx does.
	n, o := len(q.name), len(t.origin)
	if t.nx == nil || n <= o || !q.labelStart(n-o) || string(q.name[n-o:]) != string(t.origin) {
		return nil, 0
	}
	for _, a := range t.nxAvoid {
		if len(a) <= n && q.labelStart(n-len(a)) && string(q.name[n-len(a):]) == string(a) {
			return nil, 0
		}
	}
	return t.nx, n - len(t.nxName)
}

// fastAnswer answers the UDP query q from remote into out if the fast path
// can. It returns the message to send (nil for none: a rate-limited
// drop) and true, or false when q needs the full path, which then handles
// it from the start.
func (s *Server) fastAnswer(out []byte, q *wireQuery, remote netip.Addr) ([]byte, bool) {
	t := s.table.Load()
	if t == nil {
		return nil, false
	}
	if zone, _ := s.src.Snapshot(); zone != t.zone {
		return nil, false // the table is being rebuilt
	}
	tm, delta := t.lookup(q)
	if tm == nil {
		return nil, false
	}
	limit, size := dns.MinMsgSize, q.qend+len(tm.body)
	if q.edns {
		limit = int(min(max(q.size, dns.MinMsgSize), s.cfg.MaxUDPSize))
		size += optLen
	}
	if size > limit {
		return nil, false // the full path truncates
	}
	if tm.maxPtr+delta > 0x3fff {
		return nil, false // out of a pointer's reach: the full path does not compress there
	}
	if s.limit != nil {
		switch s.limit.take(remote, time.Now()) {
		case verdictDrop:
			s.metrics.dropped.Inc()
			return nil, true
		case verdictSlip:
			s.metrics.slipped.Inc()
			return slip(out, q), true
		}
	}
	out = out[:0]
	ar := tm.ar
	if q.edns {
		ar++
	}
	out = binary.BigEndian.AppendUint16(out, q.id)
	out = binary.BigEndian.AppendUint16(out, tm.flags|q.bits)
	out = binary.BigEndian.AppendUint16(out, 1)
	out = binary.BigEndian.AppendUint16(out, tm.an)
	out = binary.BigEndian.AppendUint16(out, tm.ns)
	out = binary.BigEndian.AppendUint16(out, ar)
	out = append(out, q.pkt[headerSize:q.qend]...)
	body := len(out)
	out = append(out, tm.body...)
	if delta != 0 {
		for _, p := range tm.ptrs {
			p += body
			v := binary.BigEndian.Uint16(out[p:]) + uint16(delta)
			binary.BigEndian.PutUint16(out[p:], v)
		}
	}
	if q.edns {
		var do byte
		if q.do {
			do = 0x80
		}
		out = append(out, 0, byte(dns.TypeOPT>>8), byte(dns.TypeOPT),
			byte(s.cfg.MaxUDPSize>>8), byte(s.cfg.MaxUDPSize), 0, 0, do, 0, 0, 0)
	}
	s.metrics.queries.add(q.qtype, int(tm.flags&0xf))
	return out, true
}

// slip writes to out the empty truncated answer a rate-limited query gets
// now and then, as the full path makes it: header and question only.
func slip(out []byte, q *wireQuery) []byte {
	out = out[:0]
	out = binary.BigEndian.AppendUint16(out, q.id)
	out = binary.BigEndian.AppendUint16(out, bitQR|bitTC|q.bits)
	out = append(out, 0, 1, 0, 0, 0, 0, 0, 0)
	return append(out, q.pkt[headerSize:q.qend]...)
}
