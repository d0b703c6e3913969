package dns

import (
	"github.com/miekg/dns"
)

// maxChain bounds CNAME chasing inside the zone.
const maxChain = 8

// anyTTL is the TTL of the RFC 8482 answer to ANY queries.
const anyTTL = 3600

// Answer fills m, a reply already made with SetReply, with the answer to
// q from z, marking it authoritative. q must be inside z; the caller checks.
// Every record added is a copy that m owns.
//
// It follows RFC 1034 section 4.3.2 without delegations or wildcards:
// names are matched case-insensitively, the answer keeps the question's
// spelling, CNAMEs are chased inside the zone up to maxChain links (a loop
// ends the chase), a missing name is NXDOMAIN and a missing type NODATA,
// both with the SOA in the authority section at the negative TTL. ANY is
// answered with one synthesized HINFO record (RFC 8482).
func (z *Zone) Answer(m *dns.Msg, q dns.Question) {
	m.Authoritative = true
	name := q.Name
	seen := make([]string, 0, 2)
	for range maxChain {
		key := dns.CanonicalName(name)
		n := z.nodes[key]
		if n == nil {
			m.Rcode = dns.RcodeNameError
			m.Ns = append(m.Ns, z.negativeSOA())
			return
		}
		seen = append(seen, key)
		if q.Qtype == dns.TypeANY {
			if len(n.rrsets) == 0 {
				m.Ns = append(m.Ns, z.negativeSOA())
				return
			}
			m.Answer = append(m.Answer, &dns.HINFO{
				Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeHINFO, Class: dns.ClassINET, Ttl: anyTTL},
				Cpu: "RFC8482",
			})
			return
		}
		if rrs := n.rrsets[q.Qtype]; len(rrs) > 0 {
			for _, rr := range rrs {
				m.Answer = append(m.Answer, renamed(rr, name))
			}
			z.additional(m, rrs)
			return
		}
		cn := n.rrsets[dns.TypeCNAME]
		if len(cn) == 0 {
			m.Ns = append(m.Ns, z.negativeSOA())
			return
		}
		m.Answer = append(m.Answer, renamed(cn[0], name))
		name = cn[0].(*dns.CNAME).Target
		target := dns.CanonicalName(name)
		if !dns.IsSubDomain(z.origin, target) {
			return // the client's resolver follows it
		}
		for _, s := range seen {
			if s == target {
				return // a loop: answer with the chain so far
			}
		}
	}
}

// additional adds the in-zone addresses of the targets of MX, SRV and NS
// records to the additional section.
func (z *Zone) additional(m *dns.Msg, rrs []dns.RR) {
	for _, rr := range rrs {
		var target string
		switch rr := rr.(type) {
		case *dns.MX:
			target = rr.Mx
		case *dns.SRV:
			target = rr.Target
		case *dns.NS:
			target = rr.Ns
		default:
			return
		}
		n := z.nodes[dns.CanonicalName(target)]
		if n == nil {
			continue
		}
		for _, t := range [...]uint16{dns.TypeA, dns.TypeAAAA} {
			for _, a := range n.rrsets[t] {
				m.Extra = append(m.Extra, dns.Copy(a))
			}
		}
	}
}

// negativeSOA is the SOA put in the authority section of negative answers,
// with the TTL RFC 2308 section 5 asks for.
func (z *Zone) negativeSOA() dns.RR {
	soa := z.SOA()
	soa.Hdr.Ttl = min(soa.Hdr.Ttl, soa.Minttl)
	return soa
}

// renamed returns a copy of rr owned by name, keeping the spelling the
// client used.
func renamed(rr dns.RR, name string) dns.RR {
	c := dns.Copy(rr)
	c.Header().Name = name
	return c
}
