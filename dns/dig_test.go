package dns

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"corpus/internal/testrun"
)

// TestDig queries the real server with the real dig.
func TestDig(t *testing.T) {
	t.Parallel()
	dig := lookDig(t)
	_, addr := startServer(t, testConfig(), NewStaticSource(testZone(t, 42)))
	_, port, _ := net.SplitHostPort(addr)

	tests := []struct {
		name    string
		args    []string
		want    []string
		notWant []string
	}{
		{"A", []string{"web.guest.corpus.test", "A"},
			[]string{"status: NOERROR", "flags: qr aa;", "web.guest.corpus.test.\t60\tIN\tA\t10.0.0.5"}, nil},
		{"NXDOMAIN with SOA", []string{"nope.corpus.test", "A"},
			[]string{"status: NXDOMAIN", "AUTHORITY: 1", "corpus.test.\t\t5\tIN\tSOA\tns.corpus.test. hostmaster.corpus.test. 42 60 10 86400 5"}, nil},
		{"SRV", []string{"_http._tcp.hello.dev.corpus.test", "SRV"},
			[]string{"status: NOERROR", "IN\tSRV\t0 10 8080 node-1.node.corpus.test.", "node-1.node.corpus.test. 30\tIN\tA\t192.0.2.1"}, nil},
		{"REFUSED outside", []string{"example.org", "A"}, []string{"status: REFUSED"}, []string{"ANSWER: 1"}},
		{"truncated, ignored", []string{"big.corpus.test", "A", "+ignore", "+bufsize=512"},
			[]string{"flags: qr aa tc;", "(UDP)"}, []string{"ANSWER: 100"}},
		{"truncated, retried over TCP", []string{"big.corpus.test", "A", "+bufsize=512"},
			[]string{"Truncated, retrying in TCP mode.", "flags: qr aa;", "ANSWER: 100", "(TCP)"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := digAt(t, dig, port, tt.args...)
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("dig %v output lacks %q:\n%s", tt.args, w, out)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(out, w) {
					t.Errorf("dig %v output has %q:\n%s", tt.args, w, out)
				}
			}
		})
	}
}

// digAt runs the real dig against the server on 127.0.0.1:port and
// returns its output.
func digAt(t *testing.T, dig, port string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(10*time.Second))
	defer cancel()
	args = append([]string{"@127.0.0.1", "-p", port, "+norecurse", "+tries=1", "+time=2"}, args...)
	out, err := exec.CommandContext(ctx, dig, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestDigTXT: TXT records given as a plain value and in the zone-file
// form come back from the real server to the real dig as written: a
// plain value with spaces and quotes as one string, quoted strings as
// they were split, a long value in 255-byte strings.
func TestDigTXT(t *testing.T) {
	t.Parallel()
	dig := lookDig(t)
	long := strings.Repeat("k", 300)
	z, err := NewZone("", 1, []Record{
		{Name: "spf", Type: "TXT", Data: "v=spf1 -all"},
		{Name: "quoted", Type: "TXT", Data: `"v=spf1 -all"`},
		{Name: "two", Type: "TXT", Data: `"a b" "c"`},
		{Name: "inner", Type: "TXT", Data: `say "hi" now`},
		{Name: "long", Type: "TXT", Data: long},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, testConfig(), NewStaticSource(z))
	_, port, _ := net.SplitHostPort(addr)
	for name, want := range map[string]string{
		"spf":    `"v=spf1 -all"`,
		"quoted": `"v=spf1 -all"`,
		"two":    `"a b" "c"`,
		"inner":  `"say \"hi\" now"`,
		"long":   `"` + long[:255] + `" "` + long[255:] + `"`,
	} {
		out := strings.TrimSpace(digAt(t, dig, port, "+short", name+".corpus.test", "TXT"))
		if out != want {
			t.Errorf("dig +short %s TXT = %s, want %s", name, out, want)
		}
	}
}
