package dns

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"corpus/internal/testrun"
)

// TestBindSecondary runs a real bind9 as a secondary of the server: it
// transfers the zone with TSIG, then follows a change through NOTIFY and
// answers as the server does.
func TestBindSecondary(t *testing.T) {
	t.Parallel()
	named, err := exec.LookPath("named")
	if err != nil {
		for _, p := range []string{"/usr/sbin/named", "/sbin/named"} {
			if _, err := os.Stat(p); err == nil {
				named = p
			}
		}
	}
	if named == "" {
		t.Skip("named not installed (apt-get install bind9 bind9-utils)")
	}

	// The secondary's port: bind it briefly to pick a free one.
	secPort := strconv.Itoa(testrun.FreePort(t))
	cfg := xfrConfig("127.0.0.0/8", true)
	cfg.Transfer.Secondaries = []string{net.JoinHostPort("127.0.0.1", secPort)}
	cfg.Transfer.NotifyDelay = 50 * time.Millisecond
	cfg.Transfer.NotifyTimeout = 500 * time.Millisecond
	cfg.Transfer.NotifyRetries = 10
	src := NewStaticSource(testZone(t, 100))
	_, addr := startServer(t, cfg, src)
	_, primPort, _ := net.SplitHostPort(addr)

	dir := t.TempDir()
	conf := fmt.Sprintf(`
options {
	directory %q;
	pid-file none;
	listen-on port %s { 127.0.0.1; };
	listen-on-v6 { none; };
	recursion no;
	minimal-responses yes;
	dnssec-validation no;
	notify no;
	allow-notify { 127.0.0.1; };
};
key %q {
	algorithm hmac-sha256;
	secret %q;
};
controls { };
zone "corpus.test" {
	type secondary;
	primaries port %s { 127.0.0.1 key %q; };
	file "corpus.test.db";
};
`, dir, secPort, strings.TrimSuffix(testKeyName, "."), testKeySecret, primPort, strings.TrimSuffix(testKeyName, "."))
	confPath := filepath.Join(dir, "named.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "named.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	args := []string{"-g", "-c", confPath, "-n", "1"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root")
	}
	cmd := exec.Command(named, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting named: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("named log:\n%s", b)
		}
	})
	secAddr := net.JoinHostPort("127.0.0.1", secPort)

	// waitSerial polls the secondary until it serves serial.
	waitSerial := func(serial uint32, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(testrun.D(within))
		c := &dns.Client{Net: "udp", Timeout: 300 * time.Millisecond}
		var last string
		for time.Now().Before(deadline) {
			r, _, err := c.Exchange(query("corpus.test.", dns.TypeSOA), secAddr)
			if err == nil && len(r.Answer) == 1 && r.Answer[0].(*dns.SOA).Serial == serial && r.Authoritative {
				return
			}
			last = fmt.Sprint(r, err)
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("secondary did not reach serial %d within %s; last answer: %s", serial, within, last)
	}
	waitSerial(100, 15*time.Second)

	// Change the records; NOTIFY must bring the change quickly (the SOA
	// refresh is 60 s, far longer than the wait).
	changed := time.Now()
	src.Set(testZone(t, 101, Record{Name: "fresh.guest", Type: "A", Data: "10.0.0.77"}))
	waitSerial(101, 10*time.Second)
	t.Logf("secondary caught up %s after the change", time.Since(changed).Round(time.Millisecond))

	// The secondary answers as the primary does.
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{"fresh.guest.corpus.test.", dns.TypeA},
		{"web.guest.corpus.test.", dns.TypeAAAA},
		{"_http._tcp.hello.dev.corpus.test.", dns.TypeSRV},
		{"alias.corpus.test.", dns.TypeA},
		{"nope.corpus.test.", dns.TypeA},
		{"web.guest.corpus.test.", dns.TypeMX},
	} {
		want := exchange(t, "tcp", addr, query(q.name, q.qtype))
		got := exchange(t, "tcp", secAddr, query(q.name, q.qtype))
		if got.Rcode != want.Rcode || !sameRRs(got.Answer, want.Answer) || !sameRRs(got.Ns, want.Ns) {
			t.Errorf("%s %s: secondary answered\n%v\nprimary answered\n%v", q.name, dns.TypeToString[q.qtype], got, want)
		}
	}
}

func sameRRs(a, b []dns.RR) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, rr := range a {
		seen[rr.String()]++
	}
	for _, rr := range b {
		seen[rr.String()]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}
