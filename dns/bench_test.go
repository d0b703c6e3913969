package dns

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// BenchmarkRespond measures the query path without sockets.
func BenchmarkRespond(b *testing.B) {
	s, err := New(testConfig(), NewStaticSource(testZone(b, 1)), nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range []struct{ name, qname string }{
		{"A", "web.guest.corpus.test."},
		{"CNAME chain", "alias.corpus.test."},
		{"NXDOMAIN", "nope.corpus.test."},
	} {
		b.Run(q.name, func(b *testing.B) {
			req := query(q.qname, dns.TypeA)
			b.ReportAllocs()
			for b.Loop() {
				m := s.respond(req, true, nil, testAddr)
				if _, err := m.Pack(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUDP measures queries over a real loopback UDP socket.
func BenchmarkUDP(b *testing.B) {
	_, addr := startServer(b, testConfig(), NewStaticSource(testZone(b, 1)))
	b.RunParallel(func(pb *testing.PB) {
		c := &dns.Client{Net: "udp", Timeout: time.Second}
		conn, err := c.Dial(addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer conn.Close()
		req := query("web.guest.corpus.test.", dns.TypeA)
		for pb.Next() {
			if _, _, err := c.ExchangeWithConn(req, conn); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
