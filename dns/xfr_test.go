package dns

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"corpus/internal/testrun"
)

const (
	testKeyName   = "xfr-key."
	testKeySecret = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTAxMjM0NQ=="
)

func xfrConfig(allow string, keys bool) Config {
	cfg := testConfig()
	cfg.Transfer.AllowFrom = []netip.Prefix{netip.MustParsePrefix(allow)}
	if keys {
		cfg.Transfer.Keys = map[string]string{testKeyName: testKeySecret}
	}
	return cfg
}

// axfr transfers the zone and returns its records, or the error.
func axfr(addr string, qtype uint16, serial uint32, key bool) ([]dns.RR, error) {
	m := new(dns.Msg)
	m.SetQuestion("corpus.test.", qtype)
	if qtype == dns.TypeIXFR {
		m.Ns = []dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: "corpus.test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET},
			Ns: "ns.corpus.test.", Mbox: "x.corpus.test.", Serial: serial}}
	}
	tr := &dns.Transfer{}
	if key {
		tr.TsigSecret = map[string]string{testKeyName: testKeySecret}
		m.SetTsig(testKeyName, dns.HmacSHA256, 300, time.Now().Unix())
	}
	env, err := tr.In(m, addr)
	if err != nil {
		return nil, err
	}
	var out []dns.RR
	for e := range env {
		if e.Error != nil {
			return nil, e.Error
		}
		out = append(out, e.RR...)
	}
	return out, nil
}

func TestTransfer(t *testing.T) {
	t.Parallel()
	zone := testZone(t, 7)
	tests := []struct {
		name    string
		allow   string
		keys    bool
		useKey  bool
		qtype   uint16
		serial  uint32
		wantLen int // 0: refused
	}{
		{"AXFR allowed", "127.0.0.0/8", false, false, dns.TypeAXFR, 0, zone.Len() + 1},
		{"AXFR signed when keys are optional", "127.0.0.0/8", false, false, dns.TypeAXFR, 0, zone.Len() + 1},
		{"AXFR disallowed prefix", "192.0.2.0/24", false, false, dns.TypeAXFR, 0, 0},
		{"AXFR without the key", "127.0.0.0/8", true, false, dns.TypeAXFR, 0, 0},
		{"AXFR with the key", "127.0.0.0/8", true, true, dns.TypeAXFR, 0, zone.Len() + 1},
		{"AXFR with the key, disallowed prefix", "10.0.0.0/8", true, true, dns.TypeAXFR, 0, 0},
		{"IXFR old serial gets the whole zone", "127.0.0.0/8", true, true, dns.TypeIXFR, 3, zone.Len() + 1},
		{"IXFR current serial gets the SOA", "127.0.0.0/8", true, true, dns.TypeIXFR, 7, 1},
		{"IXFR newer serial gets the SOA", "127.0.0.0/8", true, true, dns.TypeIXFR, 9, 1},
		{"IXFR without the key", "127.0.0.0/8", true, false, dns.TypeIXFR, 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, addr := startServer(t, xfrConfig(tt.allow, tt.keys), NewStaticSource(zone))
			rrs, err := axfr(addr, tt.qtype, tt.serial, tt.useKey)
			if tt.wantLen == 0 {
				if err == nil {
					t.Fatalf("transfer = %d records, want refused", len(rrs))
				}
				return
			}
			if err != nil {
				t.Fatalf("transfer: %v", err)
			}
			if len(rrs) != tt.wantLen {
				t.Fatalf("transfer = %d records, want %d", len(rrs), tt.wantLen)
			}
			if s := rrs[0].(*dns.SOA).Serial; s != 7 {
				t.Errorf("first SOA serial = %d, want 7", s)
			}
			if tt.wantLen > 1 {
				if _, ok := rrs[len(rrs)-1].(*dns.SOA); !ok {
					t.Errorf("last record = %v, want the SOA", rrs[len(rrs)-1])
				}
			}
		})
	}
}

func TestTransferRefusedRcode(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, xfrConfig("192.0.2.0/24", false), NewStaticSource(testZone(t, 1)))
	r := exchange(t, "tcp", addr, query("corpus.test.", dns.TypeAXFR))
	if r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
		t.Errorf("AXFR from a disallowed prefix = %s with %d records, want REFUSED and none", dns.RcodeToString[r.Rcode], len(r.Answer))
	}
	// IXFR over UDP is refused too.
	r = exchange(t, "udp", addr, query("corpus.test.", dns.TypeIXFR))
	if r.Rcode != dns.RcodeRefused {
		t.Errorf("IXFR over UDP = %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
}

func TestNotify(t *testing.T) {
	t.Parallel()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan uint32, 16)
	sec := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		_ = w.WriteMsg(m)
		if r.Opcode == dns.OpcodeNotify && len(r.Answer) == 1 {
			got <- r.Answer[0].(*dns.SOA).Serial
		}
	})}
	go func() { _ = sec.ActivateAndServe() }()
	t.Cleanup(func() { _ = sec.Shutdown() })

	cfg := xfrConfig("127.0.0.0/8", true)
	cfg.Transfer.Secondaries = []string{pc.LocalAddr().String()}
	cfg.Transfer.NotifyKey = testKeyName
	cfg.Transfer.NotifyDelay = 50 * time.Millisecond
	src := NewStaticSource(testZone(t, 1))
	startServer(t, cfg, src)

	wait := func(want uint32) {
		t.Helper()
		timeout := time.After(testrun.D(3 * time.Second))
		for {
			select {
			case s := <-got:
				if s == want {
					return
				}
			case <-timeout:
				t.Fatalf("no NOTIFY for serial %d", want)
			}
		}
	}
	wait(1) // on start
	// A burst of changes is debounced into one NOTIFY for the last serial.
	for s := uint32(2); s <= 5; s++ {
		src.Set(testZone(t, s))
	}
	wait(5)
	select {
	case s := <-got:
		t.Errorf("extra NOTIFY for serial %d", s)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestNotifyRetries(t *testing.T) {
	t.Parallel()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	cfg := testConfig()
	cfg.Transfer.Secondaries = []string{pc.LocalAddr().String()}
	cfg.Transfer.NotifyDelay = 10 * time.Millisecond
	cfg.Transfer.NotifyTimeout = 50 * time.Millisecond
	cfg.Transfer.NotifyRetries = 2
	startServer(t, cfg, NewStaticSource(testZone(t, 1)))
	// Never answer: the NOTIFY arrives 1 + NotifyRetries times.
	buf := make([]byte, 1024)
	n := 0
	_ = pc.SetReadDeadline(time.Now().Add(testrun.D(2 * time.Second)))
	for {
		if _, _, err := pc.ReadFrom(buf); err != nil {
			break
		}
		n++
	}
	if n != 3 {
		t.Errorf("NOTIFY sent %d times, want 3", n)
	}
}

func TestDigTransfer(t *testing.T) {
	t.Parallel()
	dig := lookDig(t)
	_, addr := startServer(t, xfrConfig("127.0.0.0/8", true), NewStaticSource(testZone(t, 11)))
	_, port, _ := net.SplitHostPort(addr)
	key := "hmac-sha256:" + strings.TrimSuffix(testKeyName, ".") + ":" + testKeySecret

	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(20*time.Second))
	defer cancel()
	out, _ := exec.CommandContext(ctx, dig, "@127.0.0.1", "-p", port, "-y", key, "corpus.test.", "AXFR").CombinedOutput()
	if !strings.Contains(string(out), "web.guest.corpus.test.\t60\tIN\tA\t10.0.0.5") ||
		strings.Count(string(out), "\tSOA\t") != 2 || !strings.Contains(string(out), "TSIG") {
		t.Errorf("dig AXFR with the key:\n%s", out)
	}
	out, _ = exec.CommandContext(ctx, dig, "@127.0.0.1", "-p", port, "-y", key, "corpus.test.", "IXFR=3").CombinedOutput()
	if strings.Count(string(out), "\tSOA\t") != 2 || !strings.Contains(string(out), "big.corpus.test.") {
		t.Errorf("dig IXFR=3 with the key:\n%s", out)
	}
	out, _ = exec.CommandContext(ctx, dig, "@127.0.0.1", "-p", port, "corpus.test.", "AXFR").CombinedOutput()
	if !strings.Contains(string(out), "Transfer failed") || strings.Contains(string(out), "10.0.0.5") {
		t.Errorf("dig AXFR without the key:\n%s", out)
	}
	bad := "hmac-sha256:" + strings.TrimSuffix(testKeyName, ".") + ":" + "d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldC13cm9uZy0wMTI="
	out, _ = exec.CommandContext(ctx, dig, "@127.0.0.1", "-p", port, "-y", bad, "corpus.test.", "AXFR").CombinedOutput()
	if strings.Contains(string(out), "10.0.0.5") {
		t.Errorf("dig AXFR with a wrong secret got the zone:\n%s", out)
	}
}

func lookDig(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("dig")
	if err != nil {
		t.Skip("dig not installed (apt-get install bind9-dnsutils)")
	}
	return p
}
