package dns

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/miekg/dns"

	"corpus/internal/testrun"
)

// testRecords is the zone most tests serve.
var testRecords = []Record{
	{Name: "web.guest", Type: "A", TTL: 60, Data: "10.0.0.5"},
	{Name: "web.guest", Type: "AAAA", TTL: 60, Data: "fd00::5"},
	{Name: "node-1.node", Type: "A", Data: "192.0.2.1"},
	{Name: "node-2.node", Type: "A", Data: "192.0.2.2"},
	{Name: "hello.dev", Type: "A", Data: "192.0.2.1"},
	{Name: "_http._tcp.hello.dev", Type: "SRV", Data: "0 10 8080 node-1.node"},
	{Name: "www", Type: "CNAME", TTL: 120, Data: "web.guest"},
	{Name: "alias", Type: "CNAME", Data: "www"},
	{Name: "outside", Type: "CNAME", Data: "example.org."},
	{Name: "loop-a", Type: "CNAME", Data: "loop-b"},
	{Name: "loop-b", Type: "CNAME", Data: "loop-a"},
	{Name: "dangling", Type: "CNAME", Data: "nothing-here"},
	{Name: "@", Type: "MX", Data: "10 mail"},
	{Name: "mail", Type: "A", Data: "192.0.2.25"},
	{Name: "txt", Type: "TXT", Data: `"hello world" "second"`},
	{Name: "Mixed.Case", Type: "A", Data: "192.0.2.9"},
}

// bigRecords makes an RRset too large for a 1232-byte UDP answer.
func bigRecords() []Record {
	var out []Record
	for i := range 100 {
		out = append(out, Record{Name: "big", Type: "A", Data: netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(i%250 + 1)}).String()})
	}
	return out
}

func testZone(t testing.TB, serial uint32, extra ...Record) *Zone {
	t.Helper()
	recs := append(append([]Record{}, testRecords...), bigRecords()...)
	z, err := NewZone("", serial, append(recs, extra...))
	if err != nil {
		t.Fatalf("NewZone: %v", err)
	}
	return z
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// testConfig listens on a dynamic loopback port with no rate limit.
var testAddr = netip.MustParseAddr("127.0.0.1")

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.RateLimit.PerSecond = 0
	return cfg
}

// startServer starts a real server and stops it at cleanup; it returns
// the address (same port for UDP and TCP).
func startServer(t testing.TB, cfg Config, src RecordSource) (*Server, string) {
	t.Helper()
	s, err := New(cfg, src, testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testrun.D(5*time.Second))
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	if s.UDPAddr().String() != s.TCPAddr().String() {
		t.Fatalf("UDP %s and TCP %s differ", s.UDPAddr(), s.TCPAddr())
	}
	return s, s.UDPAddr().String()
}

func query(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.RecursionDesired = false
	return m
}

func exchange(t testing.TB, network, addr string, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 2 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("exchange %s %s over %s: %v", m.Question[0].Name, dns.TypeToString[m.Question[0].Qtype], network, err)
	}
	return r
}

func writeFile(path, content string) error {
	return os.WriteFile(path, []byte(content), 0o644)
}
