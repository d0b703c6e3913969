package dns

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"corpus/internal/testrun"
)

// fastServer returns a server, not started, whose fast path answers from
// z.
func fastServer(t testing.TB, cfg Config, z *Zone) *Server {
	t.Helper()
	s, err := New(cfg, NewStaticSource(z), nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s.table.Store(buildTable(z))
	return s
}

// fastPath answers the UDP query pkt with the fast path; false when it
// hands pkt to the full path.
func fastPath(s *Server, pkt []byte) ([]byte, bool) {
	var q wireQuery
	if !q.parse(pkt) {
		return nil, false
	}
	out, ok := s.fastAnswer(make([]byte, 0, 1500), &q, testAddr)
	return bytes.Clone(out), ok
}

// fullPath answers the UDP query pkt as the miekg/dns server and
// Server.ServeDNS do; nil when there is no answer.
func fullPath(t testing.TB, s *Server, pkt []byte) []byte {
	t.Helper()
	if len(pkt) < headerSize {
		return nil
	}
	req := new(dns.Msg)
	if err := req.Unpack(pkt); err != nil {
		return nil
	}
	if acceptMsg(dns.Header{Bits: binary.BigEndian.Uint16(pkt[2:]), Qdcount: uint16(len(req.Question)),
		Ancount: uint16(len(req.Answer)), Nscount: uint16(len(req.Ns)), Arcount: uint16(len(req.Extra))}) != dns.MsgAccept {
		return nil
	}
	w := &recorder{udp: true}
	s.ServeDNS(w, req)
	if len(w.msgs) != 1 {
		return nil
	}
	out, err := w.msgs[0].Pack()
	if err != nil {
		t.Fatalf("packing the full path's answer: %v", err)
	}
	return out
}

func pack(t testing.TB, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatalf("pack: %v", err)
	}
	return b
}

// TestFastPathMatchesFullPath: every answer the fast path gives is the
// full path's, byte for byte, and the common queries do take it.
func TestFastPathMatchesFullPath(t *testing.T) {
	t.Parallel()
	s := fastServer(t, testConfig(), testZone(t, 7))

	type edns struct {
		size    uint16
		do      bool
		version uint8
		opts    []dns.EDNS0
	}
	tests := []struct {
		name  string
		qname string
		qtype uint16
		rd    bool
		cd    bool
		edns  *edns
		fast  bool // the fast path answers
	}{
		{name: "A", qname: "web.guest.corpus.test.", qtype: dns.TypeA, fast: true},
		{name: "A with RD and CD", qname: "web.guest.corpus.test.", qtype: dns.TypeA, rd: true, cd: true, fast: true},
		{name: "AAAA", qname: "web.guest.corpus.test.", qtype: dns.TypeAAAA, fast: true},
		{name: "SRV with additional", qname: "_http._tcp.hello.dev.corpus.test.", qtype: dns.TypeSRV, fast: true},
		{name: "MX with additional", qname: "corpus.test.", qtype: dns.TypeMX, fast: true},
		{name: "SOA", qname: "corpus.test.", qtype: dns.TypeSOA, fast: true},
		{name: "NS", qname: "corpus.test.", qtype: dns.TypeNS, fast: true},
		{name: "TXT", qname: "txt.corpus.test.", qtype: dns.TypeTXT, fast: true},
		{name: "CNAME chain", qname: "alias.corpus.test.", qtype: dns.TypeA, fast: true},
		{name: "CNAME chain to NODATA", qname: "alias.corpus.test.", qtype: dns.TypeMX, fast: true},
		{name: "CNAME asked for", qname: "www.corpus.test.", qtype: dns.TypeCNAME, fast: true},
		{name: "CNAME out of zone", qname: "outside.corpus.test.", qtype: dns.TypeA, fast: true},
		{name: "CNAME loop", qname: "loop-a.corpus.test.", qtype: dns.TypeA, fast: true},
		{name: "CNAME to nothing", qname: "dangling.corpus.test.", qtype: dns.TypeA, fast: true},
		{name: "NXDOMAIN", qname: "nope.corpus.test.", qtype: dns.TypeA, fast: true},
		{name: "NXDOMAIN deep", qname: "a.b.c.nope.guest.corpus.test.", qtype: dns.TypeAAAA, fast: true},
		{name: "NXDOMAIN below a name", qname: "x.web.guest.corpus.test.", qtype: dns.TypeA, fast: true},
		{name: "NXDOMAIN long name", qname: strings.Repeat("a.", 120) + "corpus.test.", qtype: dns.TypeA, fast: true},
		{name: "NXDOMAIN mixed-case label", qname: "NoPe.corpus.test.", qtype: dns.TypeA, fast: true},
		{name: "NXDOMAIN with EDNS", qname: "nope.corpus.test.", qtype: dns.TypeA, edns: &edns{size: 1232}, fast: true},
		{name: "NXDOMAIN under the SOA's mailbox", qname: "x.hostmaster.corpus.test.", qtype: dns.TypeA},
		{name: "NXDOMAIN the SOA's mailbox", qname: "hostmaster.corpus.test.", qtype: dns.TypeA},
		{name: "NXDOMAIN under the SOA's name server", qname: "x.ns.corpus.test.", qtype: dns.TypeA},
		{name: "NXDOMAIN mixed-case zone", qname: "nope.Corpus.test.", qtype: dns.TypeA},
		{name: "NODATA", qname: "web.guest.corpus.test.", qtype: dns.TypeMX, fast: true},
		{name: "NODATA odd type", qname: "web.guest.corpus.test.", qtype: dns.TypeNULL, fast: true},
		{name: "NODATA empty non-terminal", qname: "guest.corpus.test.", qtype: dns.TypeA, fast: true},
		{name: "mixed case A", qname: "WeB.GuEsT.CoRpUs.TeSt.", qtype: dns.TypeA, fast: true},
		{name: "mixed case owner", qname: "mixed.case.corpus.test.", qtype: dns.TypeA, fast: true},
		{name: "mixed case owner as written", qname: "Mixed.Case.corpus.test.", qtype: dns.TypeA, fast: true},
		{name: "mixed case NODATA", qname: "WEB.guest.corpus.test.", qtype: dns.TypeMX},
		{name: "mixed case SRV", qname: "_HTTP._tcp.hello.dev.corpus.test.", qtype: dns.TypeSRV},
		{name: "mixed case CNAME", qname: "Alias.corpus.test.", qtype: dns.TypeA},
		{name: "EDNS", qname: "web.guest.corpus.test.", qtype: dns.TypeA, edns: &edns{size: 4096}, fast: true},
		{name: "EDNS DO", qname: "web.guest.corpus.test.", qtype: dns.TypeA, edns: &edns{size: 1232, do: true}, fast: true},
		{name: "EDNS small size", qname: "_http._tcp.hello.dev.corpus.test.", qtype: dns.TypeSRV, edns: &edns{size: 100}, fast: true},
		{name: "EDNS cookie", qname: "web.guest.corpus.test.", qtype: dns.TypeA, fast: true,
			edns: &edns{size: 1232, opts: []dns.EDNS0{&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"}}}},
		{name: "EDNS padding and NSID", qname: "web.guest.corpus.test.", qtype: dns.TypeA, fast: true,
			edns: &edns{size: 1232, opts: []dns.EDNS0{&dns.EDNS0_NSID{Code: dns.EDNS0NSID}, &dns.EDNS0_PADDING{Padding: make([]byte, 20)}}}},
		{name: "EDNS client subnet", qname: "web.guest.corpus.test.", qtype: dns.TypeA,
			edns: &edns{size: 1232, opts: []dns.EDNS0{&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.IPv4(192, 0, 2, 0)}}}},
		{name: "EDNS version 1", qname: "web.guest.corpus.test.", qtype: dns.TypeA, edns: &edns{size: 1232, version: 1}},
		{name: "truncated without EDNS", qname: "big.corpus.test.", qtype: dns.TypeA},
		{name: "truncated with EDNS", qname: "big.corpus.test.", qtype: dns.TypeA, edns: &edns{size: 4096}},
		{name: "ANY", qname: "web.guest.corpus.test.", qtype: dns.TypeANY},
		{name: "AXFR", qname: "corpus.test.", qtype: dns.TypeAXFR},
		{name: "IXFR", qname: "corpus.test.", qtype: dns.TypeIXFR},
		{name: "outside the zone", qname: "example.org.", qtype: dns.TypeA},
		{name: "parent of the zone", qname: "test.", qtype: dns.TypeSOA},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := query(tt.qname, tt.qtype)
			m.Id = 0xbeef
			m.RecursionDesired, m.CheckingDisabled = tt.rd, tt.cd
			if tt.edns != nil {
				m.SetEdns0(tt.edns.size, tt.edns.do)
				opt := m.IsEdns0()
				opt.SetVersion(tt.edns.version)
				opt.Option = tt.edns.opts
			}
			pkt := pack(t, m)
			fast, ok := fastPath(s, pkt)
			if ok != tt.fast {
				t.Errorf("fast path taken = %v, want %v", ok, tt.fast)
			}
			if !ok {
				return
			}
			if full := fullPath(t, s, pkt); !bytes.Equal(fast, full) {
				t.Errorf("fast path answer differs from the full path's:\nfast %x\nfull %x", fast, full)
			}
		})
	}
}

// TestFastPathRandom compares the two paths on many generated queries:
// names that exist, do not, or are outside the zone, in random case, of
// random types, with random header bits and EDNS0.
func TestFastPathRandom(t *testing.T) {
	t.Parallel()
	z := testZone(t, 9,
		Record{Name: "ns", Type: "A", Data: "192.0.2.53"},
		Record{Name: "Upper.Node", Type: "A", Data: "192.0.2.60"},
		Record{Name: "_sip._udp.hello.dev", Type: "SRV", Data: "0 10 5060 Upper.Node"},
		Record{Name: "many", Type: "TXT", Data: `"` + strings.Repeat("x", 200) + `"`},
		Record{Name: "many", Type: "TXT", Data: `"` + strings.Repeat("y", 200) + `"`},
	)
	s := fastServer(t, testConfig(), z)
	var names []string
	for name := range z.nodes {
		names = append(names, name)
	}
	names = append(names, "nope.corpus.test.", "x.ns.corpus.test.", "ns.corpus.test.x.corpus.test.",
		"a.b.hostmaster.corpus.test.", "example.org.", "corpus.test.example.", "x.corpus.test.")
	types := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeTXT, dns.TypeMX, dns.TypeSRV, dns.TypeNS,
		dns.TypeSOA, dns.TypeNULL, dns.TypePTR, dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeOPT, dns.TypeHTTPS}
	r := rand.New(rand.NewPCG(1, 2))
	var fast, total int
	for range 20000 {
		name := []byte(names[r.IntN(len(names))])
		if r.IntN(4) == 0 {
			for i := range name {
				if r.IntN(3) == 0 && 'a' <= name[i] && name[i] <= 'z' {
					name[i] -= 'a' - 'A'
				}
			}
		}
		m := query(string(name), types[r.IntN(len(types))])
		m.Id = uint16(r.Uint32())
		m.RecursionDesired, m.CheckingDisabled = r.IntN(2) == 0, r.IntN(2) == 0
		if r.IntN(2) == 0 {
			m.SetEdns0(uint16(r.IntN(5000)), r.IntN(2) == 0)
			if r.IntN(4) == 0 {
				m.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0011223344556677"}}
			}
		}
		pkt := pack(t, m)
		total++
		got, ok := fastPath(s, pkt)
		if !ok {
			continue
		}
		fast++
		if want := fullPath(t, s, pkt); !bytes.Equal(got, want) {
			t.Fatalf("%s %s: fast path answer differs from the full path's:\nfast %x\nfull %x",
				name, dns.TypeToString[m.Question[0].Qtype], got, want)
		}
	}
	if fast < total/3 {
		t.Errorf("fast path answered %d of %d queries, want at least a third", fast, total)
	}
}

// FuzzFastPath: whatever packet the fast path answers, it answers as the
// full path does.
func FuzzFastPath(f *testing.F) {
	for _, m := range []*dns.Msg{
		query("web.guest.corpus.test.", dns.TypeA),
		query("nope.corpus.test.", dns.TypeA),
		query("_http._tcp.hello.dev.corpus.test.", dns.TypeSRV),
		query("WeB.guest.corpus.test.", dns.TypeMX),
	} {
		f.Add(pack(f, m))
		m.SetEdns0(1232, true)
		f.Add(pack(f, m))
	}
	s := fastServer(f, testConfig(), testZone(f, 1))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		got, ok := fastPath(s, pkt)
		if !ok {
			return
		}
		if want := fullPath(t, s, pkt); !bytes.Equal(got, want) {
			t.Fatalf("fast path answer differs from the full path's:\nfast %x\nfull %x", got, want)
		}
	})
}

// TestFastPathAllocs: answering over a socket on the fast path allocates
// nothing.
func TestFastPathAllocs(t *testing.T) {
	s := fastServer(t, testConfig(), testZone(t, 1))
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	u, err := newUDPSocket(s, pc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP("udp", nil, pc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(testrun.D(time.Minute)))
	edns := query("_http._tcp.hello.dev.corpus.test.", dns.TypeSRV)
	edns.SetEdns0(1232, false)
	buf := make([]byte, 1500)
	for _, m := range []*dns.Msg{
		query("web.guest.corpus.test.", dns.TypeA),
		query("nope.corpus.test.", dns.TypeA),
		query("web.guest.corpus.test.", dns.TypeMX),
		query("WEB.guest.corpus.test.", dns.TypeA),
		edns,
	} {
		pkt := pack(t, m)
		allocs := testing.AllocsPerRun(200, func() {
			if _, err := c.Write(pkt); err != nil {
				t.Fatal(err)
			}
			if err := u.readBatch(); err != nil || len(u.pending) > 0 {
				t.Fatalf("readBatch = %v with %d packets for the full path; want the fast path to answer", err, len(u.pending))
			}
			if _, err := c.Read(buf); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s %s: %v allocations per query, want 0", m.Question[0].Name, dns.TypeToString[m.Question[0].Qtype], allocs)
		}
	}
}

// TestUDPSockets: a server with several sockets answers clients on all
// of them.
func TestUDPSockets(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.UDPSockets = 4
	s, addr := startServer(t, cfg, NewStaticSource(testZone(t, 1)))
	if want := udpSockets(4); len(s.udp) != want {
		t.Fatalf("UDP sockets = %d, want %d", len(s.udp), want)
	}
	for i := range 32 {
		qname := "web.guest.corpus.test."
		if i%2 == 1 {
			qname = "corpus.test." // ANY: the full path
		}
		m := query(qname, dns.TypeA)
		if i%2 == 1 {
			m.Question[0].Qtype = dns.TypeANY
		}
		if r := exchange(t, "udp", addr, m); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("query %d: %v", i, r)
		}
	}
}

// TestUnspecifiedAddress: bound to 0.0.0.0, the server answers from the
// address each query was sent to, on both paths.
func TestUnspecifiedAddress(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Addr = "0.0.0.0:0"
	_, addr := startServer(t, cfg, NewStaticSource(testZone(t, 1)))
	_, port, _ := net.SplitHostPort(addr)
	for _, host := range []string{"127.0.0.1", "127.0.0.2"} {
		for _, qtype := range []uint16{dns.TypeA, dns.TypeANY} {
			// dns.Client's UDP socket is connected: it drops an answer
			// from any other address.
			r := exchange(t, "udp", net.JoinHostPort(host, port), query("web.guest.corpus.test.", qtype))
			if len(r.Answer) != 1 {
				t.Errorf("%s %s: answer = %v", host, dns.TypeToString[qtype], r.Answer)
			}
		}
	}
}

// TestTableFollowsZone: the fast path's table is rebuilt for every new
// zone, and answers from the old one are never given for the new.
func TestTableFollowsZone(t *testing.T) {
	t.Parallel()
	src := NewStaticSource(testZone(t, 1))
	s, _ := startServer(t, testConfig(), src)
	z := testZone(t, 2, Record{Name: "late", Type: "A", Data: "10.9.9.9"})
	src.Set(z)
	pkt := pack(t, query("late.corpus.test.", dns.TypeA))
	deadline := time.Now().Add(testrun.D(5 * time.Second))
	for s.table.Load().zone != z {
		// The table may be swapped while the fast path answers: only an
		// answer given while an older table stayed in place is wrong.
		before := s.table.Load()
		if _, ok := fastPath(s, pkt); ok && s.table.Load() == before && before.zone != z {
			t.Fatal("fast path answered from a table of an older zone")
		}
		if time.Now().After(deadline) {
			t.Fatal("table not rebuilt for the new zone")
		}
		time.Sleep(time.Millisecond)
	}
	got, ok := fastPath(s, pkt)
	if !ok {
		t.Fatal("fast path does not answer from the new table")
	}
	if want := fullPath(t, s, pkt); !bytes.Equal(got, want) {
		t.Errorf("fast path answer differs from the full path's:\nfast %x\nfull %x", got, want)
	}
}

// BenchmarkFastPath measures the fast path without sockets.
func BenchmarkFastPath(b *testing.B) {
	s := fastServer(b, testConfig(), testZone(b, 1))
	for _, q := range []struct {
		name  string
		qname string
		qtype uint16
	}{
		{"A", "web.guest.corpus.test.", dns.TypeA},
		{"SRV", "_http._tcp.hello.dev.corpus.test.", dns.TypeSRV},
		{"NXDOMAIN", "nope.corpus.test.", dns.TypeA},
	} {
		b.Run(q.name, func(b *testing.B) {
			pkt := pack(b, query(q.qname, q.qtype))
			var wq wireQuery
			out := make([]byte, 0, 1500)
			b.ReportAllocs()
			for b.Loop() {
				if !wq.parse(pkt) {
					b.Fatal("parse failed")
				}
				if _, ok := s.fastAnswer(out, &wq, testAddr); !ok {
					b.Fatal("not on the fast path")
				}
			}
		})
	}
}
