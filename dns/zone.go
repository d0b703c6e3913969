package dns

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/miekg/dns"
)

// DefaultZone is the zone served when none is configured.
const DefaultZone = "corpus.test."

// Zone defaults used when a zone is built without its own SOA or TTLs.
const (
	// DefaultTTL is the TTL of records given without one.
	DefaultTTL = 30
	// DefaultNegativeTTL is the SOA minimum, the TTL of negative answers.
	DefaultNegativeTTL = 5
)

// Record is one resource record given as data.
//
// Name is the owner: "@" for the apex, a name relative to the zone
// ("web.guest") or an absolute name ending in a dot. Type is one of A, AAAA,
// CNAME, TXT, MX, SRV, NS or SOA. TTL 0 means DefaultTTL. Data is the rdata
// in zone-file presentation format, where names may be relative to the zone:
// "10.0.0.5", "10 mail", "0 5 8080 node-1.node", `"v=spf1 -all"`. TXT data
// that does not start with a double quote is one plain string, as
// written: `v=spf1 -all` is the same record as `"v=spf1 -all"`.
type Record struct {
	Name string `json:"name"`
	Type string `json:"type"`
	TTL  uint32 `json:"ttl,omitempty"`
	Data string `json:"data"`
}

func (r Record) String() string {
	return fmt.Sprintf("%s %d %s %s", r.Name, r.TTL, r.Type, r.Data)
}

// allowedTypes are the record types a Zone holds.
var allowedTypes = map[uint16]bool{
	dns.TypeA: true, dns.TypeAAAA: true, dns.TypeCNAME: true, dns.TypeTXT: true,
	dns.TypeMX: true, dns.TypeSRV: true, dns.TypeNS: true, dns.TypeSOA: true,
}

// Zone is an immutable view of one zone's records at one serial. It is safe
// for concurrent use; nothing it returns may be modified by the caller
// unless the method says the caller owns it.
type Zone struct {
	origin string // canonical (lowercase, fully qualified)
	serial uint32
	soa    *dns.SOA
	nodes  map[string]*node // by canonical owner name, with empty non-terminals
	rrs    []dns.RR         // every record but the SOA, in canonical order
	// skipped are the records given that the zone cannot serve.
	skipped []Skipped
}

// node holds the RRsets of one owner name; an empty map is an empty
// non-terminal, a name that exists only because names below it do.
type node struct {
	rrsets map[uint16][]dns.RR
}

// NewZone builds a zone for origin (DefaultZone when empty) at serial from
// records. Without an SOA record it synthesizes one (ns.ORIGIN,
// hostmaster.ORIGIN, negative TTL DefaultNegativeTTL); without an apex NS it
// adds one naming the SOA's primary server. The SOA's serial is always
// serial. It returns ErrBadRecord, ErrOutOfZone, ErrCNAMEConflict or
// ErrDelegation, wrapped with the offending record: NewZone is BuildZone
// that takes no record it cannot serve.
func NewZone(origin string, serial uint32, records []Record) (*Zone, error) {
	z, err := BuildZone(origin, serial, records)
	if err != nil {
		return nil, err
	}
	if len(z.skipped) > 0 {
		return nil, z.skipped[0].Err
	}
	return z, nil
}

// Skipped is a record a zone was built without, and why.
type Skipped struct {
	// Record is the record as given, its name made absolute.
	Record Record
	// Err wraps ErrBadRecord, ErrOutOfZone, ErrCNAMEConflict or
	// ErrDelegation, and names the record.
	Err error
}

// BuildZone builds a zone as NewZone does, but a record it cannot serve
// (one that does not parse, lies outside the zone, is a delegation, or
// puts a CNAME beside other data, the apex's SOA and NS included) is
// left out rather than failing the whole zone; Skipped lists them with
// why. The SOA goes in first, then the other records in the order given,
// so of two records that conflict the later one is left out: callers put
// the records that must win first. Only an origin that is not a domain
// name is an error (ErrBadRecord).
func BuildZone(origin string, serial uint32, records []Record) (*Zone, error) {
	if origin == "" {
		origin = DefaultZone
	}
	origin = dns.CanonicalName(origin)
	if _, ok := dns.IsDomainName(origin); !ok {
		return nil, fmt.Errorf("zone %q: %w", origin, ErrBadRecord)
	}
	z := &Zone{origin: origin, serial: serial, nodes: map[string]*node{}}
	type parsed struct {
		rec Record
		rr  dns.RR
	}
	var soas, rest []parsed
	for _, rec := range records {
		rr, err := parseRecord(origin, rec)
		switch {
		case err != nil:
			z.skip(rec, err)
		case rr.Header().Rrtype == dns.TypeSOA:
			soas = append(soas, parsed{rec, rr})
		default:
			rest = append(rest, parsed{rec, rr})
		}
	}
	add := func(ps []parsed) {
		for _, p := range ps {
			if err := z.add(p.rr); err != nil {
				z.skip(p.rec, fmt.Errorf("record %q: %w", p.rec.String(), err))
			}
		}
	}
	add(soas)
	if z.soa == nil {
		soa := &dns.SOA{
			Hdr:     dns.RR_Header{Name: origin, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: DefaultTTL},
			Ns:      "ns." + origin,
			Mbox:    "hostmaster." + origin,
			Refresh: 60,
			Retry:   10,
			Expire:  86400,
			Minttl:  DefaultNegativeTTL,
		}
		if err := z.add(soa); err != nil {
			return nil, fmt.Errorf("zone %q: synthesized SOA: %w", origin, err)
		}
	}
	add(rest)
	z.soa.Serial = serial
	if apex := z.nodes[origin]; len(apex.rrsets[dns.TypeNS]) == 0 {
		ns := &dns.NS{Hdr: dns.RR_Header{Name: origin, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: z.soa.Hdr.Ttl}, Ns: z.soa.Ns}
		if err := z.add(ns); err != nil {
			return nil, fmt.Errorf("zone %q: synthesized NS: %w", origin, err)
		}
	}
	z.index()
	return z, nil
}

// skip records that the zone leaves rec out for err, under its absolute
// name.
func (z *Zone) skip(rec Record, err error) {
	switch name := strings.TrimSpace(rec.Name); {
	case name == "" || name == "@":
		rec.Name = z.origin
	case !strings.HasSuffix(name, "."):
		rec.Name = name + "." + z.origin
	}
	z.skipped = append(z.skipped, Skipped{Record: rec, Err: err})
}

// Skipped returns the records the zone was built without, with why; the
// caller owns the slice.
func (z *Zone) Skipped() []Skipped { return slices.Clone(z.skipped) }

// parseRecord turns rec into one RR of an allowed type, owned inside origin.
func parseRecord(origin string, rec Record) (dns.RR, error) {
	if strings.ContainsAny(rec.Name+rec.Type+rec.Data, "\n\r") {
		return nil, fmt.Errorf("record %q: line break: %w", rec.String(), ErrBadRecord)
	}
	want, ok := dns.StringToType[strings.ToUpper(strings.TrimSpace(rec.Type))]
	if !ok || !allowedTypes[want] {
		return nil, fmt.Errorf("record %q: type %q: %w", rec.String(), rec.Type, ErrBadRecord)
	}
	name := strings.TrimSpace(rec.Name)
	if name == "" {
		name = "@"
	}
	ttl := rec.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	data := rec.Data
	plainTXT := want == dns.TypeTXT && !strings.HasPrefix(strings.TrimSpace(data), `"`)
	if plainTXT {
		data = `""` // the owner and TTL are parsed as for any record; the text is set below
	}
	line := fmt.Sprintf("%s %d IN %s %s", name, ttl, dns.TypeToString[want], data)
	zp := dns.NewZoneParser(strings.NewReader(line), origin, "")
	rr, ok := zp.Next()
	if !ok {
		err := zp.Err()
		if err == nil {
			err = fmt.Errorf("no record")
		}
		return nil, fmt.Errorf("record %q: %v: %w", rec.String(), err, ErrBadRecord)
	}
	if _, more := zp.Next(); more || zp.Err() != nil {
		return nil, fmt.Errorf("record %q: trailing data: %w", rec.String(), ErrBadRecord)
	}
	if rr.Header().Rrtype != want {
		return nil, fmt.Errorf("record %q: parsed as %s: %w", rec.String(), dns.TypeToString[rr.Header().Rrtype], ErrBadRecord)
	}
	if plainTXT {
		rr.(*dns.TXT).Txt = txtStrings(rec.Data)
	}
	return rr, nil
}

// maxTXTString is the longest character-string of a TXT record (RFC 1035
// section 3.3: a length byte, then the characters).
const maxTXTString = 255

// txtStrings is TXT data given as a plain value: one string, as written
// (spaces and quotes included), cut into character-strings of at most
// maxTXTString bytes when longer, in miekg/dns's presentation form (a
// backslash, a double quote and control bytes escaped). Data that starts
// with a double quote is the zone-file form instead, quoted strings with
// \" and \DDD escapes, which the zone parser reads.
func txtStrings(v string) []string {
	var out []string
	for {
		n := min(len(v), maxTXTString)
		var b strings.Builder
		for _, c := range []byte(v[:n]) {
			switch {
			case c == '\\' || c == '"':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c < ' ' || c == 0x7f:
				fmt.Fprintf(&b, "\\%03d", c)
			default:
				b.WriteByte(c)
			}
		}
		out, v = append(out, b.String()), v[n:]
		if v == "" {
			return out
		}
	}
}

// add inserts rr, creating its node and the empty non-terminals above it.
func (z *Zone) add(rr dns.RR) error {
	name, err := z.check(rr)
	if err != nil {
		return err
	}
	h := rr.Header()
	h.Class = dns.ClassINET
	if h.Rrtype == dns.TypeSOA {
		z.soa = rr.(*dns.SOA)
	}
	n := z.nodes[name]
	if n == nil {
		n = &node{rrsets: map[uint16][]dns.RR{}}
		z.nodes[name] = n
		for p := parentName(name); p != "" && dns.IsSubDomain(z.origin, p); p = parentName(p) {
			if z.nodes[p] == nil {
				z.nodes[p] = &node{rrsets: map[uint16][]dns.RR{}}
			}
		}
	}
	t := h.Rrtype
	for _, old := range n.rrsets[t] {
		if dns.IsDuplicate(old, rr) {
			return nil
		}
	}
	n.rrsets[t] = append(n.rrsets[t], rr)
	return nil
}

// check says whether rr can go into the zone as it stands, and under
// which canonical name: inside it, an SOA only at the apex and only one,
// NS only at the apex, no CNAME beside other data at its name.
func (z *Zone) check(rr dns.RR) (string, error) {
	h := rr.Header()
	name := dns.CanonicalName(h.Name)
	if !dns.IsSubDomain(z.origin, name) {
		return "", ErrOutOfZone
	}
	switch h.Rrtype {
	case dns.TypeSOA:
		if name != z.origin {
			return "", fmt.Errorf("SOA below the apex: %w", ErrBadRecord)
		}
		if z.soa != nil {
			return "", fmt.Errorf("second SOA: %w", ErrBadRecord)
		}
	case dns.TypeNS:
		if name != z.origin {
			return "", ErrDelegation
		}
	}
	if n := z.nodes[name]; n != nil {
		t := h.Rrtype
		if t == dns.TypeCNAME && len(n.rrsets) > 0 || t != dns.TypeCNAME && len(n.rrsets[dns.TypeCNAME]) > 0 {
			return "", ErrCNAMEConflict
		}
	}
	return name, nil
}

// Fits returns the error NewZone would give for the zone's records and
// rec, nil when rec could join them; it looks at rec's name alone, so
// checking one more record does not rebuild a zone of many.
func (z *Zone) Fits(rec Record) error {
	rr, err := parseRecord(z.origin, rec)
	if err != nil {
		return err
	}
	if _, err := z.check(rr); err != nil {
		return fmt.Errorf("record %q: %w", rec.String(), err)
	}
	return nil
}

// OwnerName returns rec's owner as a zone of origin (DefaultZone when
// empty) holds it: absolute and lowercase. The error is the one NewZone
// gives for a record that does not parse.
func OwnerName(origin string, rec Record) (string, error) {
	if origin == "" {
		origin = DefaultZone
	}
	rr, err := parseRecord(dns.CanonicalName(origin), rec)
	if err != nil {
		return "", err
	}
	return dns.CanonicalName(rr.Header().Name), nil
}

// index fills z.rrs in canonical order for transfers and listings.
func (z *Zone) index() {
	// Each name split once: splitting inside the comparison made the
	// sort most of a rebuild's cost.
	type sortName struct {
		name   string
		labels []string
	}
	names := make([]sortName, 0, len(z.nodes))
	for name := range z.nodes {
		names = append(names, sortName{name, dns.SplitDomainName(name)})
	}
	sort.Slice(names, func(i, j int) bool { return labelsLess(names[i].labels, names[j].labels) })
	for _, sn := range names {
		name := sn.name
		n := z.nodes[name]
		types := make([]int, 0, len(n.rrsets))
		for t := range n.rrsets {
			types = append(types, int(t))
		}
		sort.Ints(types)
		for _, t := range types {
			if uint16(t) == dns.TypeSOA {
				continue
			}
			z.rrs = append(z.rrs, n.rrsets[uint16(t)]...)
		}
	}
}

// parentName returns name without its first label, or "" for the root.
func parentName(name string) string {
	off, end := dns.NextLabel(name, 0)
	if end {
		return ""
	}
	return name[off:]
}

// labelsLess orders names, given as their labels, as RFC 4034 section 6.1
// does: by labels read from the right.
func labelsLess(la, lb []string) bool {
	for i, j := len(la)-1, len(lb)-1; i >= 0 && j >= 0; i, j = i-1, j-1 {
		if la[i] != lb[j] {
			return la[i] < lb[j]
		}
	}
	return len(la) < len(lb)
}

// Origin returns the zone's name, lowercase and fully qualified.
func (z *Zone) Origin() string { return z.origin }

// Serial returns the zone's SOA serial.
func (z *Zone) Serial() uint32 { return z.serial }

// SOA returns a copy of the zone's SOA record; the caller owns it.
func (z *Zone) SOA() *dns.SOA { return dns.Copy(z.soa).(*dns.SOA) }

// Len returns the number of records in the zone, the SOA included.
func (z *Zone) Len() int { return len(z.rrs) + 1 }

// RRs returns copies of every record, the SOA first, in canonical order;
// the caller owns them.
func (z *Zone) RRs() []dns.RR {
	out := make([]dns.RR, 0, len(z.rrs)+1)
	out = append(out, z.SOA())
	for _, rr := range z.rrs {
		out = append(out, dns.Copy(rr))
	}
	return out
}

// Records returns the zone as Record values, the SOA first, with absolute
// names; the caller owns the slice.
func (z *Zone) Records() []Record {
	rrs := z.RRs()
	out := make([]Record, 0, len(rrs))
	for _, rr := range rrs {
		h := rr.Header()
		hdr := h.String()
		out = append(out, Record{
			Name: h.Name,
			Type: dns.TypeToString[h.Rrtype],
			TTL:  h.Ttl,
			Data: strings.TrimPrefix(rr.String(), hdr),
		})
	}
	return out
}
