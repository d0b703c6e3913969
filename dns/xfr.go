package dns

import (
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// maxQuerySize is the largest UDP query read; longer datagrams are cut and
// then fail to parse.
const maxQuerySize = 4096

// xfrBatch is the number of records per transfer message.
const xfrBatch = 200

// Zone transfers keep no history: IXFR from an older serial is answered
// with the whole zone in AXFR form, which RFC 1995 section 4 allows, and
// IXFR from the current serial (or a newer one) with the single SOA record.

// transferAllowed reports whether r, from remote, may transfer the zone:
// remote must be inside an allowed prefix and, when keys are configured, r
// must carry a valid TSIG of one of them.
func (s *Server) transferAllowed(r *dns.Msg, tsigErr error, remote netip.Addr) bool {
	ok := false
	for _, p := range s.allow {
		if p.Contains(remote) {
			ok = true
			break
		}
	}
	if !ok {
		return false
	}
	if len(s.xfrKey) == 0 {
		return true
	}
	t := r.IsTsig()
	return t != nil && tsigErr == nil && s.xfrKey[dns.CanonicalName(t.Hdr.Name)]
}

// transfer answers AXFR and IXFR over TCP.
func (s *Server) transfer(w dns.ResponseWriter, r *dns.Msg) {
	remote := addrOf(w.RemoteAddr())
	q := r.Question[0]
	zone, _ := s.src.Snapshot()
	tsig := r.IsTsig()
	refuse := func(rcode int) {
		m := new(dns.Msg)
		m.SetRcode(r, rcode)
		_ = w.WriteMsg(m)
		s.metrics.answered(r, rcode)
	}
	switch {
	case tsig != nil && w.TsigStatus() != nil:
		s.log.Info("zone transfer refused", "remote", remote.String(), "reason", "bad tsig", "err", w.TsigStatus())
		refuse(dns.RcodeNotAuth)
		return
	case q.Qclass != dns.ClassINET || dns.CanonicalName(q.Name) != zone.Origin():
		refuse(dns.RcodeRefused)
		return
	case !s.transferAllowed(r, w.TsigStatus(), remote):
		s.log.Info("zone transfer refused", "remote", remote.String(), "reason", "not allowed")
		refuse(dns.RcodeRefused)
		return
	}
	soa := zone.SOA()
	soa.Hdr.Name = q.Name
	var batches [][]dns.RR
	if q.Qtype == dns.TypeIXFR && ixfrUpToDate(r, zone.Serial()) {
		batches = [][]dns.RR{{soa}}
	} else {
		rrs := zone.RRs()
		rrs[0] = soa
		rrs = append(rrs, soa)
		for len(rrs) > 0 {
			n := min(len(rrs), xfrBatch)
			batches = append(batches, rrs[:n])
			rrs = rrs[n:]
		}
	}
	s.metrics.answered(r, dns.RcodeSuccess)
	for i, batch := range batches {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		m.Compress = true
		m.Answer = batch
		if tsig != nil {
			m.SetTsig(tsig.Hdr.Name, tsig.Algorithm, tsig.Fudge, time.Now().Unix())
		}
		if err := w.WriteMsg(m); err != nil {
			s.log.Info("zone transfer aborted", "remote", remote.String(), "err", err)
			return
		}
		if i == 0 {
			w.TsigTimersOnly(true)
		}
	}
	s.log.Info("zone transferred", "remote", remote.String(), "type", dns.TypeToString[q.Qtype],
		"serial", zone.Serial(), "records", zone.Len())
}

// ixfrUDP answers IXFR over UDP (RFC 1995 section 2): the SOA alone when
// the client is up to date, otherwise an empty truncated answer that sends
// it to TCP.
func (s *Server) ixfrUDP(m, r *dns.Msg, zone *Zone, remote netip.Addr) {
	// respond has already answered NOTAUTH to a bad signature.
	if !s.transferAllowed(r, nil, remote) || dns.CanonicalName(r.Question[0].Name) != zone.Origin() {
		m.Rcode = dns.RcodeRefused
		return
	}
	m.Authoritative = true
	if ixfrUpToDate(r, zone.Serial()) {
		soa := zone.SOA()
		soa.Hdr.Name = r.Question[0].Name
		m.Answer = append(m.Answer, soa)
		return
	}
	m.Truncated = true
}

// ixfrUpToDate reports whether the IXFR request r carries a serial at or
// after serial, in RFC 1982 arithmetic.
func ixfrUpToDate(r *dns.Msg, serial uint32) bool {
	if len(r.Ns) != 1 {
		return false
	}
	soa, ok := r.Ns[0].(*dns.SOA)
	if !ok {
		return false
	}
	return soa.Serial == serial || serialLess(serial, soa.Serial)
}

// serialLess reports a < b in RFC 1982 serial arithmetic.
func serialLess(a, b uint32) bool {
	return a != b && int32(b-a) > 0
}
