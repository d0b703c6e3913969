package dns

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"corpus/internal/testrun"
)

func TestQueries(t *testing.T) {
	t.Parallel()
	src := NewStaticSource(testZone(t, 42))
	_, addr := startServer(t, testConfig(), src)

	type want struct {
		rcode   int
		answer  []string // RR strings, order-insensitive
		soaAuth bool     // SOA in authority with the negative TTL
		aa      bool
	}
	tests := []struct {
		name  string
		qname string
		qtype uint16
		want  want
	}{
		{"guest A", "web.guest.corpus.test.", dns.TypeA, want{rcode: dns.RcodeSuccess, aa: true,
			answer: []string{"web.guest.corpus.test.\t60\tIN\tA\t10.0.0.5"}}},
		{"guest AAAA", "web.guest.corpus.test.", dns.TypeAAAA, want{rcode: dns.RcodeSuccess, aa: true,
			answer: []string{"web.guest.corpus.test.\t60\tIN\tAAAA\tfd00::5"}}},
		{"default TTL", "node-1.node.corpus.test.", dns.TypeA, want{rcode: dns.RcodeSuccess, aa: true,
			answer: []string{"node-1.node.corpus.test.\t30\tIN\tA\t192.0.2.1"}}},
		{"case preserved", "WeB.GuEsT.CoRpUs.TeSt.", dns.TypeA, want{rcode: dns.RcodeSuccess, aa: true,
			answer: []string{"WeB.GuEsT.CoRpUs.TeSt.\t60\tIN\tA\t10.0.0.5"}}},
		{"mixed-case owner", "mixed.case.corpus.test.", dns.TypeA, want{rcode: dns.RcodeSuccess, aa: true,
			answer: []string{"mixed.case.corpus.test.\t30\tIN\tA\t192.0.2.9"}}},
		{"SRV", "_http._tcp.hello.dev.corpus.test.", dns.TypeSRV, want{rcode: dns.RcodeSuccess, aa: true,
			answer: []string{"_http._tcp.hello.dev.corpus.test.\t30\tIN\tSRV\t0 10 8080 node-1.node.corpus.test."}}},
		{"MX", "corpus.test.", dns.TypeMX, want{rcode: dns.RcodeSuccess, aa: true,
			answer: []string{"corpus.test.\t30\tIN\tMX\t10 mail.corpus.test."}}},
		{"TXT", "txt.corpus.test.", dns.TypeTXT, want{rcode: dns.RcodeSuccess, aa: true,
			answer: []string{"txt.corpus.test.\t30\tIN\tTXT\t\"hello world\" \"second\""}}},
		{"SOA serial", "corpus.test.", dns.TypeSOA, want{rcode: dns.RcodeSuccess, aa: true,
			answer: []string{"corpus.test.\t30\tIN\tSOA\tns.corpus.test. hostmaster.corpus.test. 42 60 10 86400 5"}}},
		{"NXDOMAIN", "nope.corpus.test.", dns.TypeA, want{rcode: dns.RcodeNameError, aa: true, soaAuth: true}},
		{"NXDOMAIN below a name", "x.web.guest.corpus.test.", dns.TypeA, want{rcode: dns.RcodeNameError, aa: true, soaAuth: true}},
		{"NODATA", "web.guest.corpus.test.", dns.TypeMX, want{rcode: dns.RcodeSuccess, aa: true, soaAuth: true}},
		{"empty non-terminal is NODATA", "guest.corpus.test.", dns.TypeA, want{rcode: dns.RcodeSuccess, aa: true, soaAuth: true}},
		{"no wildcard", "*.guest.corpus.test.", dns.TypeA, want{rcode: dns.RcodeNameError, aa: true, soaAuth: true}},
		{"CNAME chased", "alias.corpus.test.", dns.TypeA, want{rcode: dns.RcodeSuccess, aa: true, answer: []string{
			"alias.corpus.test.\t30\tIN\tCNAME\twww.corpus.test.",
			"www.corpus.test.\t120\tIN\tCNAME\tweb.guest.corpus.test.",
			"web.guest.corpus.test.\t60\tIN\tA\t10.0.0.5"}}},
		{"CNAME asked for", "www.corpus.test.", dns.TypeCNAME, want{rcode: dns.RcodeSuccess, aa: true,
			answer: []string{"www.corpus.test.\t120\tIN\tCNAME\tweb.guest.corpus.test."}}},
		{"CNAME out of zone", "outside.corpus.test.", dns.TypeA, want{rcode: dns.RcodeSuccess, aa: true,
			answer: []string{"outside.corpus.test.\t30\tIN\tCNAME\texample.org."}}},
		{"CNAME loop", "loop-a.corpus.test.", dns.TypeA, want{rcode: dns.RcodeSuccess, aa: true, answer: []string{
			"loop-a.corpus.test.\t30\tIN\tCNAME\tloop-b.corpus.test.",
			"loop-b.corpus.test.\t30\tIN\tCNAME\tloop-a.corpus.test."}}},
		{"CNAME to nothing", "dangling.corpus.test.", dns.TypeA, want{rcode: dns.RcodeNameError, aa: true, soaAuth: true,
			answer: []string{"dangling.corpus.test.\t30\tIN\tCNAME\tnothing-here.corpus.test."}}},
		{"ANY is minimal", "web.guest.corpus.test.", dns.TypeANY, want{rcode: dns.RcodeSuccess, aa: true,
			answer: []string{"web.guest.corpus.test.\t3600\tIN\tHINFO\t\"RFC8482\" \"\""}}},
		{"outside the zone", "example.org.", dns.TypeA, want{rcode: dns.RcodeRefused}},
		{"parent of the zone", "test.", dns.TypeSOA, want{rcode: dns.RcodeRefused}},
		{"AXFR over UDP", "corpus.test.", dns.TypeAXFR, want{rcode: dns.RcodeRefused}},
	}
	for _, tt := range tests {
		for _, network := range []string{"udp", "tcp"} {
			t.Run(tt.name+"/"+network, func(t *testing.T) {
				t.Parallel()
				r := exchange(t, network, addr, query(tt.qname, tt.qtype))
				if r.Rcode != tt.want.rcode {
					t.Fatalf("rcode = %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tt.want.rcode])
				}
				if r.Authoritative != tt.want.aa {
					t.Errorf("AA = %v, want %v", r.Authoritative, tt.want.aa)
				}
				if r.RecursionAvailable {
					t.Errorf("RA set by an authoritative server")
				}
				if r.Question[0].Name != tt.qname {
					t.Errorf("question = %q, want %q", r.Question[0].Name, tt.qname)
				}
				var got []string
				for _, rr := range r.Answer {
					got = append(got, rr.String())
				}
				want := slices.Clone(tt.want.answer)
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("answer = %q, want %q", got, want)
				}
				hasSOA := len(r.Ns) == 1 && r.Ns[0].Header().Rrtype == dns.TypeSOA
				if hasSOA != tt.want.soaAuth {
					t.Fatalf("authority = %v, want SOA: %v", r.Ns, tt.want.soaAuth)
				}
				if hasSOA {
					soa := r.Ns[0].(*dns.SOA)
					if soa.Hdr.Ttl != 5 || soa.Serial != 42 {
						t.Errorf("negative SOA TTL, serial = %d, %d, want 5, 42", soa.Hdr.Ttl, soa.Serial)
					}
				}
				if tt.want.rcode == dns.RcodeRefused && len(r.Answer)+len(r.Ns)+len(r.Extra) != 0 {
					t.Errorf("refused answer carries records: %v", r)
				}
			})
		}
	}
}

func TestAdditionalForSRV(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, testConfig(), NewStaticSource(testZone(t, 1)))
	r := exchange(t, "udp", addr, query("_http._tcp.hello.dev.corpus.test.", dns.TypeSRV))
	if len(r.Extra) != 1 || r.Extra[0].String() != "node-1.node.corpus.test.\t30\tIN\tA\t192.0.2.1" {
		t.Errorf("additional = %v, want node-1's A", r.Extra)
	}
}

func TestEDNS(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	_, addr := startServer(t, cfg, NewStaticSource(testZone(t, 1)))

	tests := []struct {
		name    string
		bufsize uint16 // 0: no EDNS
		version uint8
		do      bool
		network string
		qname   string
		wantTC  bool
		wantOPT bool
		rcode   int
		maxLen  int
	}{
		{"no EDNS small", 0, 0, false, "udp", "web.guest.corpus.test.", false, false, dns.RcodeSuccess, 512},
		{"no EDNS big truncates", 0, 0, false, "udp", "big.corpus.test.", true, false, dns.RcodeSuccess, 512},
		{"EDNS echoed", 4096, 0, false, "udp", "web.guest.corpus.test.", false, true, dns.RcodeSuccess, 1232},
		{"DO echoed", 1232, 0, true, "udp", "web.guest.corpus.test.", false, true, dns.RcodeSuccess, 1232},
		{"client size honoured", 700, 0, false, "udp", "big.corpus.test.", true, true, dns.RcodeSuccess, 700},
		{"server cap", 65000, 0, false, "udp", "big.corpus.test.", true, true, dns.RcodeSuccess, 1232},
		{"below 512 means 512", 100, 0, false, "udp", "big.corpus.test.", true, true, dns.RcodeSuccess, 512},
		{"TCP not truncated", 0, 0, false, "tcp", "big.corpus.test.", false, false, dns.RcodeSuccess, 65535},
		{"BADVERS", 1232, 1, false, "udp", "web.guest.corpus.test.", false, true, dns.RcodeBadVers, 512},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := query(tt.qname, dns.TypeA)
			if tt.bufsize > 0 {
				m.SetEdns0(tt.bufsize, tt.do)
				m.IsEdns0().SetVersion(tt.version)
			}
			c := &dns.Client{Net: tt.network, Timeout: 2 * time.Second, UDPSize: 65535}
			r, _, err := c.Exchange(m, addr)
			if err != nil {
				t.Fatalf("exchange: %v", err)
			}
			if r.Rcode != tt.rcode {
				t.Errorf("rcode = %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tt.rcode])
			}
			if r.Truncated != tt.wantTC {
				t.Errorf("TC = %v, want %v", r.Truncated, tt.wantTC)
			}
			opt := r.IsEdns0()
			if (opt != nil) != tt.wantOPT {
				t.Fatalf("OPT = %v, want present: %v", opt, tt.wantOPT)
			}
			if opt != nil {
				if opt.UDPSize() != cfg.MaxUDPSize || opt.Do() != tt.do || opt.Version() != 0 {
					t.Errorf("OPT size, DO, version = %d, %v, %d, want %d, %v, 0", opt.UDPSize(), opt.Do(), opt.Version(), cfg.MaxUDPSize, tt.do)
				}
			}
			r.Compress = true
			if n := r.Len(); n > tt.maxLen {
				t.Errorf("answer length = %d, want <= %d", n, tt.maxLen)
			}
			if tt.qname == "big.corpus.test." && !tt.wantTC && len(r.Answer) != 100 {
				t.Errorf("answers = %d, want 100", len(r.Answer))
			}
		})
	}
}

// TestChangesVisible checks that a new zone is answered as soon as the
// source has it.
func TestChangesVisible(t *testing.T) {
	t.Parallel()
	src := NewStaticSource(testZone(t, 1))
	_, addr := startServer(t, testConfig(), src)
	for serial := uint32(2); serial < 20; serial++ {
		src.Set(testZone(t, serial, Record{Name: "new", Type: "A", Data: "10.9.9." + itoa(int(serial))}))
		r := exchange(t, "udp", addr, query("corpus.test.", dns.TypeSOA))
		if got := r.Answer[0].(*dns.SOA).Serial; got != serial {
			t.Fatalf("serial = %d, want %d", got, serial)
		}
		r = exchange(t, "udp", addr, query("new.corpus.test.", dns.TypeA))
		if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "10.9.9."+itoa(int(serial)) {
			t.Fatalf("new = %v, want 10.9.9.%d", r.Answer, serial)
		}
	}
}

func itoa(i int) string { return strings.TrimSpace(strings.Repeat(" ", 0) + fmtInt(i)) }

func fmtInt(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return fmtInt(i/10) + string(rune('0'+i%10))
}

// TestRobustness sends malformed and unusual messages and checks the
// answer (or silence), that nothing is amplified, and that the server
// still answers afterwards.
func TestRobustness(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, testConfig(), NewStaticSource(testZone(t, 1)))

	pack := func(m *dns.Msg) []byte {
		b, err := m.Pack()
		if err != nil {
			t.Fatalf("pack: %v", err)
		}
		return b
	}
	twoQ := query("web.guest.corpus.test.", dns.TypeA)
	twoQ.Question = append(twoQ.Question, dns.Question{Name: "node-1.node.corpus.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	update := query("corpus.test.", dns.TypeSOA)
	update.Opcode = dns.OpcodeUpdate
	notify := query("corpus.test.", dns.TypeSOA)
	notify.Opcode = dns.OpcodeNotify
	status := query("corpus.test.", dns.TypeSOA)
	status.Opcode = dns.OpcodeStatus
	response := query("corpus.test.", dns.TypeSOA)
	response.Response = true
	chaos := query("version.bind.", dns.TypeTXT)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	longName := query(strings.Repeat("a.", 120)+"corpus.test.", dns.TypeA)
	outside := query("a.very.long.name.that.is.outside.the.zone.example.", dns.TypeANY)
	outside.SetEdns0(4096, true)

	tests := []struct {
		name  string
		raw   []byte
		rcode int // -1: no answer expected
	}{
		{"empty", nil, -1},
		{"short header", []byte{1, 2, 3}, -1},
		{"garbage with QR set", []byte(strings.Repeat("\xff", 100)), -1},
		{"garbage", []byte("\x12\x34\x00\x00\x00\x01" + strings.Repeat("\xc0", 100)), dns.RcodeFormatError},
		{"truncated question", pack(query("web.guest.corpus.test.", dns.TypeA))[:20], dns.RcodeFormatError},
		{"two questions", pack(twoQ), dns.RcodeFormatError},
		{"UPDATE", pack(update), dns.RcodeNotImplemented},
		{"NOTIFY", pack(notify), dns.RcodeNotImplemented},
		{"STATUS", pack(status), dns.RcodeNotImplemented},
		{"a response", pack(response), -1},
		{"CHAOS class", pack(chaos), dns.RcodeRefused},
		{"long name", pack(longName), dns.RcodeNameError},
		{"outside ANY with EDNS", pack(outside), dns.RcodeRefused},
		{"oversized", append(pack(query("web.guest.corpus.test.", dns.TypeA)), make([]byte, 8000)...), dns.RcodeSuccess},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("udp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write(tt.raw); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			buf := make([]byte, 65535)
			n, err := conn.Read(buf)
			if tt.rcode < 0 {
				if err == nil {
					t.Fatalf("got a %d-byte answer, want none", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			r := new(dns.Msg)
			if err := r.Unpack(buf[:n]); err != nil {
				t.Fatalf("unpacking answer: %v", err)
			}
			if r.Rcode != tt.rcode {
				t.Errorf("rcode = %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tt.rcode])
			}
			if tt.rcode != dns.RcodeSuccess && tt.rcode != dns.RcodeNameError && n > len(tt.raw)+64 {
				t.Errorf("answer %d bytes to a %d-byte query: amplification", n, len(tt.raw))
			}
		})
	}
	t.Cleanup(func() {
		r := exchange(t, "udp", addr, query("web.guest.corpus.test.", dns.TypeA))
		if len(r.Answer) != 1 {
			t.Errorf("after the abuse: answer = %v", r.Answer)
		}
	})
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.RateLimit = RateLimit{PerSecond: 1, Burst: 5, Slip: 2, MaxSources: 10}
	_, addr := startServer(t, cfg, NewStaticSource(testZone(t, 1)))
	c := &dns.Client{Net: "udp", Timeout: 200 * time.Millisecond}
	var answered, slipped, dropped int
	for range 20 {
		r, _, err := c.Exchange(query("web.guest.corpus.test.", dns.TypeA), addr)
		switch {
		case err != nil:
			dropped++
		case r.Truncated && len(r.Answer) == 0:
			slipped++
		default:
			answered++
		}
	}
	if answered < 5 || answered > 6 || slipped == 0 || dropped == 0 {
		t.Errorf("answered, slipped, dropped = %d, %d, %d; want 5-6 answered, some slipped and dropped", answered, slipped, dropped)
	}
	// TCP is not limited.
	if r := exchange(t, "tcp", addr, query("web.guest.corpus.test.", dns.TypeA)); len(r.Answer) != 1 {
		t.Errorf("TCP answer = %v", r.Answer)
	}
}

func TestLimiterRefillAndPrune(t *testing.T) {
	t.Parallel()
	l := newLimiter(RateLimit{PerSecond: 10, Burst: 2, Slip: 0, MaxSources: 2})
	now := time.Unix(0, 0)
	a := addrOf(&net.UDPAddr{IP: net.IPv4(10, 0, 0, 1)})
	for i, want := range []verdict{verdictAllow, verdictAllow, verdictDrop} {
		if got := l.take(a, now); got != want {
			t.Fatalf("take #%d = %v, want %v", i, got, want)
		}
	}
	if got := l.take(a, now.Add(100*time.Millisecond)); got != verdictAllow {
		t.Errorf("take after refill = %v, want allow", got)
	}
	for i := range 10 {
		l.take(addrOf(&net.UDPAddr{IP: net.IPv4(10, 0, 1, byte(i))}), now)
	}
	if len(l.buckets) > 2 {
		t.Errorf("buckets = %d, want <= 2", len(l.buckets))
	}
}

func TestTCPLimits(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxTCPConns = 2
	cfg.TCPIdleTimeout = 300 * time.Millisecond
	cfg.TCPReadTimeout = 300 * time.Millisecond
	_, addr := startServer(t, cfg, NewStaticSource(testZone(t, 1)))

	var conns []*dns.Conn
	for range 2 {
		c, err := dns.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
		if err := c.WriteMsg(query("web.guest.corpus.test.", dns.TypeA)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ReadMsg(); err != nil {
			t.Fatalf("read on an allowed connection: %v", err)
		}
	}
	// A third connection is closed at once.
	third, err := dns.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	_ = third.SetDeadline(time.Now().Add(testrun.D(time.Second)))
	_ = third.WriteMsg(query("web.guest.corpus.test.", dns.TypeA))
	if _, err := third.ReadMsg(); err == nil {
		t.Errorf("third connection answered, want it closed")
	}
	// Idle connections are closed, which frees the slots.
	time.Sleep(600 * time.Millisecond)
	_ = conns[0].SetDeadline(time.Now().Add(testrun.D(time.Second)))
	_ = conns[0].WriteMsg(query("web.guest.corpus.test.", dns.TypeA))
	if _, err := conns[0].ReadMsg(); err == nil {
		t.Errorf("idle connection still open")
	}
	r := exchange(t, "tcp", addr, query("web.guest.corpus.test.", dns.TypeA))
	if len(r.Answer) != 1 {
		t.Errorf("after idle close: answer = %v", r.Answer)
	}
}
