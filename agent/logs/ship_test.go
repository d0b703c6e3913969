package logs

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"corpus/internal/pki"
	"corpus/internal/testrun"
)

func TestSyslogMessage(t *testing.T) {
	t.Parallel()
	e := Entry{Time: time.Date(2026, 11, 26, 5, 0, 0, 123000000, time.UTC), Source: SourceApp, Process: "web", Release: "r3", Line: `GET / "x"`}
	got := syslogMessage("n1", "hello-dev", `pro"j]`, e)
	want := `<14>1 2026-11-26T05:00:00.123000Z n1 hello-dev web app [corpus@32473 project="pro\"j\]" release="r3" source="app"] GET / "x"`
	if got != want {
		t.Errorf("syslogMessage =\n%s\nwant\n%s", got, want)
	}
	if got := syslogMessage("", "", "", Entry{Time: e.Time, Source: SourceDeploy, Line: "x"}); !strings.HasPrefix(got, "<14>1 2026-11-26T05:00:00.123000Z - - - deploy [corpus@32473 source=\"deploy\"] x") {
		t.Errorf("empty fields: %s", got)
	}
}

// rsyslog starts a real rsyslogd receiving on 127.0.0.1, over TLS when
// tlsDir holds ca.pem, cert.pem and key.pem, writing what it gets to the
// file it returns.
func rsyslog(t *testing.T, tlsDir string) (addr, out string) {
	t.Helper()
	bin, err := exec.LookPath("rsyslogd")
	if err != nil {
		if os.Getenv("CORPUS_TEST_REQUIRE_RSYSLOG") == "1" {
			t.Fatal("rsyslogd is missing (scripts/setup --test installs rsyslog)")
		}
		t.Skip("needs rsyslogd (apt-get install rsyslog rsyslog-gnutls)")
	}
	dir := t.TempDir()
	out = filepath.Join(dir, "out.log")
	// Port 0 and the port file: rsyslogd binds a free port itself and
	// names it, so no other process can take the port between a probe
	// and rsyslogd's bind.
	portFile := filepath.Join(dir, "port")
	input := fmt.Sprintf(`module(load="imtcp")
input(type="imtcp" address="127.0.0.1" port="0" listenPortFileName="%s")`, portFile)
	if tlsDir != "" {
		input = fmt.Sprintf(`global(DefaultNetstreamDriver="gtls"
  DefaultNetstreamDriverCAFile="%[1]s/ca.pem" DefaultNetstreamDriverCertFile="%[1]s/cert.pem" DefaultNetstreamDriverKeyFile="%[1]s/key.pem")
module(load="imtcp" StreamDriver.Name="gtls" StreamDriver.Mode="1" StreamDriver.AuthMode="anon")
input(type="imtcp" address="127.0.0.1" port="0" listenPortFileName="%[2]s")`, tlsDir, portFile)
	}
	conf := fmt.Sprintf(`global(workDirectory="%[1]s")
%[2]s
template(name="fields" type="string" string="%%hostname%%|%%app-name%%|%%procid%%|%%msgid%%|%%structured-data%%|%%msg%%\n")
action(type="omfile" file="%[3]s" template="fields")
`, dir, input, out)
	confFile := filepath.Join(dir, "rsyslog.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-n", "-f", confFile, "-i", filepath.Join(dir, "pid"))
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			// rsyslogd's own errors go to its actions, so to out.
			b, _ := os.ReadFile(out)
			t.Logf("rsyslogd's output:\n%s\nwhat it wrote to %s:\n%s", log.String(), out, b)
		}
	})
	testrun.Wait(t, 10*time.Second, "rsyslogd listening", func() error {
		select {
		case <-exited:
			return fmt.Errorf("rsyslogd exited: %v", cmd.ProcessState)
		default:
		}
		b, err := os.ReadFile(portFile)
		if err != nil {
			return fmt.Errorf("no port file yet: %w", err)
		}
		port := strings.TrimSpace(string(b))
		if port == "" || port == "0" {
			return fmt.Errorf("port file holds %q", b)
		}
		addr = net.JoinHostPort("127.0.0.1", port)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
	return addr, out
}

// TestShipToRsyslog ships stored lines to a real rsyslog, over TCP and
// over TLS, and to a JSON lines file.
func TestShipToRsyslog(t *testing.T) {
	t.Parallel()
	tlsDir := t.TempDir()
	caCert, caKey, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(caCert, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, _, err := ca.IssueKeyPair(pki.Request{Role: pki.RoleNode, ID: "receiver", IPs: []net.IP{net.ParseIP("127.0.0.1")}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"ca.pem": caCert, "cert.pem": cert, "key.pem": key} {
		if err := os.WriteFile(filepath.Join(tlsDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range []string{"tcp", "tls"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := ""
			if mode == "tls" {
				dir = tlsDir
			}
			addr, out := rsyslog(t, dir)
			jsonFile := filepath.Join(t.TempDir(), "guests.jsonl")
			sh, err := NewShipper(ShipConfig{Syslog: mode + "://" + addr, CAFile: filepath.Join(tlsDir, "ca.pem"), File: jsonFile, Node: "n1",
				Names: func(id string) (string, string) { return "hello-dev", "hello" }})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := Open(Config{Dir: t.TempDir()})
			s.ShipTo(sh)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go sh.Run(ctx)
			for i := range 100 {
				s.Append("g1", Entry{Source: SourceApp, Process: "web", Release: "r3", Line: fmt.Sprintf("line %d with \"quotes\" and ] é", i)})
			}
			s.Append("g1", Entry{Source: SourceDeploy, Release: "r3", Line: "-----> start"})
			var got []string
			deadline := time.Now().Add(testrun.D(15 * time.Second))
			for len(got) < 101 && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
				b, _ := os.ReadFile(out)
				got = strings.Split(strings.TrimSpace(string(b)), "\n")
			}
			if len(got) != 101 {
				t.Fatalf("rsyslog got %d lines of 101", len(got))
			}
			if want := `n1|hello-dev|web|app|[corpus@32473 project="hello" release="r3" source="app"]|line 7 with "quotes" and ] é`; got[7] != want {
				t.Errorf("line 7 as rsyslog parsed it:\n%s\nwant\n%s", got[7], want)
			}
			if want := `n1|hello-dev|-|deploy|[corpus@32473 project="hello" release="r3" source="deploy"]|-----> start`; got[100] != want {
				t.Errorf("the deploy line as rsyslog parsed it:\n%s\nwant\n%s", got[100], want)
			}
			b, _ := os.ReadFile(jsonFile)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			var first struct{ Node, Guest, Project, Source, Process, Release, Line string }
			if len(lines) != 101 || json.Unmarshal([]byte(lines[0]), &first) != nil || first.Guest != "hello-dev" || first.Project != "hello" || first.Line != `line 0 with "quotes" and ] é` {
				t.Errorf("JSON lines file: %d lines, first %+v", len(lines), first)
			}
		})
	}
}

// TestShipperNeverBlocks: without a receiver, storing goes on at full
// speed and what could not be shipped is counted.
func TestShipperNeverBlocks(t *testing.T) {
	t.Parallel()
	sh, err := NewShipper(ShipConfig{Syslog: "tcp://127.0.0.1:1", Queue: 10})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := Open(Config{Dir: t.TempDir()})
	s.ShipTo(sh)
	for range 1000 {
		s.Append("g1", Entry{Source: SourceApp, Line: "x"})
	}
	if sh.Dropped() < 990 {
		t.Errorf("dropped %d of 1000 with a queue of 10 and no receiver", sh.Dropped())
	}
	if _, err := NewShipper(ShipConfig{Syslog: "udp://x:514"}); err == nil {
		t.Error("a udp:// target was accepted")
	}
}
