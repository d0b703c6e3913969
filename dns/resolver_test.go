package dns

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"

	"corpus/internal/testrun"
)

func TestResolver(t *testing.T) {
	t.Parallel()
	// The upstream is a real server for another zone, on loopback.
	upZone, err := NewZone("example.org.", 1, []Record{{Name: "www", Type: "A", TTL: 300, Data: "198.51.100.1"}})
	if err != nil {
		t.Fatal(err)
	}
	upSrc := NewStaticSource(upZone)
	_, upAddr := startServer(t, testConfig(), upSrc)

	r, err := NewResolver(ResolverConfig{Addr: "127.0.0.1:0", Upstreams: []string{upAddr}, CacheSize: 100},
		ZoneHandler(NewStaticSource(testZone(t, 5))), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testrun.D(5*time.Second))
		defer cancel()
		_ = r.Shutdown(ctx)
	})
	addr := r.UDPAddr().String()

	tests := []struct {
		name   string
		qname  string
		rcode  int
		answer string
	}{
		{"cluster zone", "web.guest.corpus.test.", dns.RcodeSuccess, "web.guest.corpus.test.\t60\tIN\tA\t10.0.0.5"},
		{"cluster NXDOMAIN", "nope.corpus.test.", dns.RcodeNameError, ""},
		{"forwarded", "www.example.org.", dns.RcodeSuccess, "www.example.org.\t300\tIN\tA\t198.51.100.1"},
		{"forwarded refusal", "other.net.", dns.RcodeRefused, ""},
	}
	for _, tt := range tests {
		for _, network := range []string{"udp", "tcp"} {
			m := query(tt.qname, dns.TypeA)
			m.RecursionDesired = true
			got := exchange(t, network, addr, m)
			if got.Rcode != tt.rcode || !got.RecursionAvailable {
				t.Errorf("%s over %s: rcode, RA = %s, %v, want %s, true", tt.name, network, dns.RcodeToString[got.Rcode], got.RecursionAvailable, dns.RcodeToString[tt.rcode])
			}
			if tt.answer != "" && (len(got.Answer) != 1 || got.Answer[0].String() != tt.answer) {
				t.Errorf("%s over %s: answer = %v, want %s", tt.name, network, got.Answer, tt.answer)
			}
		}
	}

	// The forwarded answer is cached: a change upstream is not seen yet.
	next, _ := NewZone("example.org.", 2, []Record{{Name: "www", Type: "A", Data: "198.51.100.2"}})
	upSrc.Set(next)
	got := exchange(t, "udp", addr, query("www.example.org.", dns.TypeA))
	if len(got.Answer) != 1 || got.Answer[0].(*dns.A).A.String() != "198.51.100.1" {
		t.Errorf("cached answer = %v, want 198.51.100.1", got.Answer)
	}
	// Zone transfers through the resolver are refused.
	got = exchange(t, "tcp", addr, query("example.org.", dns.TypeAXFR))
	if got.Rcode != dns.RcodeRefused {
		t.Errorf("AXFR via the resolver = %s, want REFUSED", dns.RcodeToString[got.Rcode])
	}
}

func TestResolverUpstreamDown(t *testing.T) {
	t.Parallel()
	port := strconv.Itoa(testrun.FreePort(t))
	r, err := NewResolver(ResolverConfig{Addr: "127.0.0.1:0", Upstreams: []string{"127.0.0.1:" + port}, Timeout: 200 * time.Millisecond},
		&Forwarder{Upstreams: []string{"127.0.0.1:" + port}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Shutdown(context.Background()) }()
	got := exchange(t, "udp", r.UDPAddr().String(), query("www.example.org.", dns.TypeA))
	if got.Rcode != dns.RcodeServerFailure {
		t.Errorf("rcode = %s, want SERVFAIL", dns.RcodeToString[got.Rcode])
	}
}

func TestResolverResolvConf(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/resolv.conf"
	if err := writeFile(path, "nameserver 127.0.0.53\n"); err != nil {
		t.Fatal(err)
	}
	r, err := NewResolver(ResolverConfig{Addr: "127.0.0.1:0", ResolvConf: path}, &Forwarder{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.fwd.Upstreams; len(got) != 1 || got[0] != "127.0.0.53:53" {
		t.Errorf("upstreams = %v, want [127.0.0.53:53]", got)
	}
}
