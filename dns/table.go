package dns

import (
	"bytes"
	"encoding/binary"

	"github.com/miekg/dns"
)

// answerTable holds, for one zone snapshot, the answers of the fast path in
// wire format, ready to be copied behind a query's header and question.
// It is built off the query path whenever the zone changes (see
// Server.buildTables) and never modified after; a nil table, or one whose
// zone is not the source's current one, sends every query to the full path.
//
// Every answer is the packed output of Zone.Answer for a question in
// canonical (lowercase) spelling, so the fast path answers exactly as the
// full path does; the tests compare the two byte for byte.
type answerTable struct {
	zone   *Zone
	origin []byte // the origin in wire format, lowercase
	// names holds the answers for every name in the zone, empty
	// non-terminals included, by lowercase wire-format name.
	names map[string]*nameAnswers
	// nx is the NXDOMAIN answer, built for the question nxName; a longer
	// question shifts its compression pointers. nil: NXDOMAIN goes to the
	// full path.
	nx     *template
	nxName []byte
	// nxAvoid are the suffixes of the names in nx that are longer than the
	// origin: a question ending in one of them is compressed differently,
	// so it goes to the full path.
	nxAvoid [][]byte
}

// nameAnswers are the answers for one name: one per query type found on
// the name or along the CNAME chain that starts there, and one for every
// other type. A nil template sends its queries to the full path.
type nameAnswers struct {
	types []typedTemplate
	other *template
}

type typedTemplate struct {
	qtype uint16
	t     *template
}

// template is one packed answer without its header's ID, RD and CD bits
// and without its question, which come from the query.
type template struct {
	flags      uint16 // QR, AA and the rcode
	an, ns, ar uint16 // section counts, without an OPT record
	body       []byte // the answer, authority and additional sections
	// ptrs are the offsets in body of compression pointers, shifted when
	// the template answers a question longer than the one it was built
	// for (nx only).
	ptrs   []int
	maxPtr int // the largest offset a pointer points to
	// caseSafe says that the answer names nothing but the question: a
	// question in any spelling gets the same bytes behind it.
	caseSafe bool
}

// nxLabel is the label of the name nx is built for: a byte no real
// name uses, so that nothing in the zone owns it or compresses into it.
const nxLabel = `\000`

// buildTable returns the fast-path table for z. A zone it cannot represent
// (a name whose wire form does not spell back to itself) gets a table that
// sends every query to the full path.
func buildTable(z *Zone) *answerTable {
	t := &answerTable{zone: z}
	origin, ok := wireName(z.origin)
	if !ok {
		return t
	}
	names := make(map[string]*nameAnswers, len(z.nodes))
	for key := range z.nodes {
		w, ok := wireName(key)
		if !ok {
			return t
		}
		na := &nameAnswers{other: buildTemplate(z, key, len(w), dns.TypeNULL)}
		for _, qt := range chainTypes(z, key) {
			na.types = append(na.types, typedTemplate{qtype: qt, t: buildTemplate(z, key, len(w), qt)})
		}
		names[string(w)] = na
	}
	t.origin, t.names = origin, names
	t.buildNX()
	return t
}

// buildNX fills nx, nxName and nxAvoid.
func (t *answerTable) buildNX() {
	name := nxLabel + "." + t.zone.origin
	w, ok := wireName(name)
	if !ok || t.zone.nodes[name] != nil {
		return
	}
	m, packed := answerFor(t.zone, name, dns.TypeNULL)
	if m == nil || m.Rcode != dns.RcodeNameError {
		return
	}
	tm := templateOf(m, packed, len(w))
	if tm == nil {
		return
	}
	// Every pointer must point into the origin's part of the question or
	// behind it, the parts that move together when the question is longer.
	lowest := headerSize + len(w) - len(t.origin)
	for _, p := range tm.ptrs {
		if int(binary.BigEndian.Uint16(tm.body[p:])&0x3fff) < lowest {
			return
		}
	}
	var avoid [][]byte
	for _, rr := range append(append(append([]dns.RR{}, m.Answer...), m.Ns...), m.Extra...) {
		for _, n := range rrNames(rr) {
			wn, ok := wireName(n)
			if !ok {
				return
			}
			for off := 0; len(wn)-off > len(t.origin); off += int(wn[off]) + 1 {
				avoid = append(avoid, wn[off:])
			}
		}
	}
	t.nx, t.nxName, t.nxAvoid = tm, w, avoid
}

// headerSize is the length of a DNS message header.
const headerSize = 12

// buildTemplate returns the template answering (name, qtype), where name
// is wlen bytes long in wire format, or nil when that answer cannot be a
// template.
func buildTemplate(z *Zone, name string, wlen int, qtype uint16) *template {
	m, packed := answerFor(z, name, qtype)
	if m == nil {
		return nil
	}
	tm := templateOf(m, packed, wlen)
	if tm == nil {
		return nil
	}
	tm.caseSafe = len(m.Ns) == 0 && len(m.Extra) == 0
	for _, rr := range m.Answer {
		switch rr.Header().Rrtype {
		case dns.TypeA, dns.TypeAAAA, dns.TypeTXT:
		default:
			tm.caseSafe = false
		}
		if rr.Header().Name != name {
			tm.caseSafe = false
		}
	}
	return tm
}

// answerFor answers (name, qtype) as the full path does for a query
// without RD, CD or EDNS0, and packs the answer. It returns nil when the
// packed length is not what Msg.Len says, which the full path's truncation
// goes by.
func answerFor(z *Zone, name string, qtype uint16) (*dns.Msg, []byte) {
	m := new(dns.Msg)
	m.Response = true
	m.Question = []dns.Question{{Name: name, Qtype: qtype, Qclass: dns.ClassINET}}
	z.Answer(m, m.Question[0])
	m.Compress = true
	packed, err := m.Pack()
	if err != nil || m.Len() != len(packed) {
		return nil, nil
	}
	return m, packed
}

// templateOf makes a template of the packed message m whose question name
// is qlen bytes long in wire format.
func templateOf(m *dns.Msg, packed []byte, qlen int) *template {
	qend := headerSize + qlen + 4
	if qlen <= 0 || len(packed) < qend {
		return nil
	}
	tm := &template{
		flags: binary.BigEndian.Uint16(packed[2:]),
		an:    binary.BigEndian.Uint16(packed[6:]),
		ns:    binary.BigEndian.Uint16(packed[8:]),
		ar:    binary.BigEndian.Uint16(packed[10:]),
		body:  bytes.Clone(packed[qend:]),
	}
	if int(tm.an) != len(m.Answer) || int(tm.ns) != len(m.Ns) || int(tm.ar) != len(m.Extra) {
		return nil
	}
	ptrs, ok := pointers(packed, qend, int(tm.an)+int(tm.ns)+int(tm.ar))
	if !ok {
		return nil
	}
	for _, p := range ptrs {
		tm.ptrs = append(tm.ptrs, p-qend)
		tm.maxPtr = max(tm.maxPtr, int(binary.BigEndian.Uint16(packed[p:])&0x3fff))
	}
	return tm
}

// pointers returns the offsets of the compression pointers in the n
// records of msg from off, in owner names and in the rdata names of the
// types that a zone holds; false if a record does not parse.
func pointers(msg []byte, off, n int) ([]int, bool) {
	var ptrs []int
	name := func(off int) (int, bool) {
		for off < len(msg) {
			switch l := int(msg[off]); {
			case l == 0:
				return off + 1, true
			case l&0xc0 == 0xc0:
				ptrs = append(ptrs, off)
				return off + 2, off+2 <= len(msg)
			case l&0xc0 != 0:
				return 0, false
			default:
				off += 1 + l
			}
		}
		return 0, false
	}
	for range n {
		var ok bool
		if off, ok = name(off); !ok || off+10 > len(msg) {
			return nil, false
		}
		typ := binary.BigEndian.Uint16(msg[off:])
		rdlen := int(binary.BigEndian.Uint16(msg[off+8:]))
		off += 10
		end := off + rdlen
		if end > len(msg) {
			return nil, false
		}
		switch typ {
		case dns.TypeCNAME, dns.TypeNS, dns.TypePTR:
			_, ok = name(off)
		case dns.TypeMX:
			_, ok = name(off + 2)
		case dns.TypeSRV:
			_, ok = name(off + 6)
		case dns.TypeSOA:
			var next int
			if next, ok = name(off); ok {
				_, ok = name(next)
			}
		}
		if !ok {
			return nil, false
		}
		off = end
	}
	return ptrs, off == len(msg)
}

// rrNames returns the names in rr that its packing may compress: the owner
// and the rdata names of the types a zone holds.
func rrNames(rr dns.RR) []string {
	names := []string{rr.Header().Name}
	switch rr := rr.(type) {
	case *dns.CNAME:
		names = append(names, rr.Target)
	case *dns.NS:
		names = append(names, rr.Ns)
	case *dns.MX:
		names = append(names, rr.Mx)
	case *dns.SRV:
		names = append(names, rr.Target)
	case *dns.SOA:
		names = append(names, rr.Ns, rr.Mbox)
	}
	return names
}

// chainTypes returns the record types on name and along the in-zone CNAME
// chain from it: the query types whose answers differ from the answer to
// any other type.
func chainTypes(z *Zone, name string) []uint16 {
	var types []uint16
	seen := map[string]bool{}
	for n := z.nodes[name]; n != nil && !seen[name] && len(seen) < maxChain; n = z.nodes[name] {
		seen[name] = true
		for t := range n.rrsets {
			if !containsType(types, t) {
				types = append(types, t)
			}
		}
		cn := n.rrsets[dns.TypeCNAME]
		if len(cn) == 0 {
			break
		}
		name = dns.CanonicalName(cn[0].(*dns.CNAME).Target)
	}
	return types
}

func containsType(types []uint16, t uint16) bool {
	for _, x := range types {
		if x == t {
			return true
		}
	}
	return false
}

// wireName returns name in wire format, or false when the wire form does
// not spell back to name in canonical form, so that a query could not be
// matched to it by its wire bytes.
func wireName(name string) ([]byte, bool) {
	buf := make([]byte, 256)
	n, err := dns.PackDomainName(name, buf, 0, nil, false)
	if err != nil {
		return nil, false
	}
	back, _, err := dns.UnpackDomainName(buf[:n], 0)
	if err != nil || dns.CanonicalName(back) != dns.CanonicalName(name) {
		return nil, false
	}
	return buf[:n:n], true
}
