package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"corpus/internal/metrics/metricstest"
	"corpus/internal/testrun"
)

// TestEnrollment: a join token works once; reused, wrong or garbage tokens
// and invalid node names are refused with a clear error, creating nothing.
func TestEnrollment(t *testing.T) {
	c := newCluster(t)
	tok := strings.TrimSpace(c.mustCLI("node", "token"))

	enroll := func(name, token string) (string, int) {
		dir := filepath.Join(c.dir, "enroll-"+name)
		p := startIn(t, c.lab.ctl, "agent "+name, nil, "agent", "--state-dir", dir, "--coordinator", c.api,
			"--name", name, "--api-addr", "127.0.0.1:0", "--git-addr", "127.0.0.1:0", "--join-token", token, "--drivers", "lxc", "--network=false", "--metrics-addr", "")
		select {
		case <-p.done:
			return p.log.String(), p.cmd.ProcessState.ExitCode()
		case <-time.After(testrun.D(10 * time.Second)):
			return p.log.String(), -1 // still running: enrolled
		}
	}
	if _, code := enroll("first", tok); code != -1 {
		t.Fatalf("enrolling with a fresh token exited %d, want it to keep running", code)
	}
	parts := strings.Split(tok, ".") // ID.SECRET.PIN
	for _, tc := range []struct{ name, node, token, want string }{
		{"reused token", "second", tok, "join token is invalid"},
		{"wrong secret", "third", parts[0] + ".deadbeef." + parts[2], "join token is invalid"},
		{"garbage", "fourth", "garbage", "not of the form ID.SECRET.PIN"},
		{"no pin", "fifth", parts[0] + "." + parts[1], "not of the form ID.SECRET.PIN"},
		// A host told to trust another CA refuses this coordinator
		// (an impostor, from its point of view) and sends it nothing.
		{"another cluster's pin", "sixth", parts[0] + "." + parts[1] + "." + strings.Repeat("ab", 32), "not from the CA the join token names"},
		{"invalid name", "Bad_Name", tok, "invalid name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, code := enroll(tc.node, tc.token)
			if code <= 0 || !strings.Contains(log, tc.want) {
				t.Errorf("enroll %s = exit %d, log %q; want a non-zero exit saying %q", tc.node, code, log, tc.want)
			}
		})
	}
	var nodes struct {
		Nodes []struct {
			Node struct{ Name string } `json:"node"`
		} `json:"nodes"`
	}
	if err := c.json(&nodes, "node", "list"); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Nodes) != 1 || nodes.Nodes[0].Node.Name != "first" {
		t.Errorf("node list = %+v, want only node first", nodes.Nodes)
	}
}

// TestBadInputChangesNothing: invalid requests get one clear error line, a
// non-zero exit, and no guest appears.
func TestBadInputChangesNothing(t *testing.T) {
	c := newCluster(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"guest", "create", "Web", "--image", "busybox"}, "must start with a lowercase letter"},
		{[]string{"guest", "create", "a_b", "--image", "busybox"}, "DNS label"},
		{[]string{"guest", "create", "../etc", "--image", "busybox"}, "invalid name"},
		{[]string{"guest", "create", strings.Repeat("a", 64), "--image", "busybox"}, "limit is 63"},
		{[]string{"guest", "create", "ok", "--image", ""}, "image is required"},
		{[]string{"guest", "create", "ok", "--image", "busybox", "--memory", "lots"}, "--memory"},
		{[]string{"guest", "create", "ok", "--image", "busybox", "--memory", "1M"}, "below the minimum"},
		{[]string{"guest", "create", "ok", "--image", "busybox", "--cpus", "-1"}, "--cpus"},
		{[]string{"guest", "create", "ok", "--image", "busybox", "--env", "1X=y"}, "environment variable name"},
		{[]string{"guest", "show", "nope"}, "not found"},
		{[]string{"guest", "exec", "nope", "--", "true"}, "not found"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, errOut, code := c.cli(tc.args...)
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			if code == 0 || !strings.Contains(errOut, tc.want) || len(lines) != 1 {
				t.Errorf("corpus %v = exit %d, stderr %q; want one line saying %q", tc.args, code, errOut, tc.want)
			}
		})
	}
	var list struct {
		Guests []any `json:"guests"`
	}
	if err := c.json(&list, "guest", "list"); err != nil || len(list.Guests) != 0 {
		t.Errorf("guest list = %v, %v; want no guests", list.Guests, err)
	}
	// Without credentials, nothing is answered.
	_, errOut, code := c.cli("--token", "", "guest", "list")
	if code == 0 || !strings.Contains(errOut, "credential") {
		t.Errorf("guest list without a token = exit %d, %q; want refused", code, errOut)
	}
}

// TestLoginAndRoles: an operator issues a dev a token; `corpus login`
// stores it; the dev reads but may not create guests; revoked, it stops.
func TestLoginAndRoles(t *testing.T) {
	c := newCluster(t)
	c.mustCLI("user", "add", "alice", "--role", "dev")
	var tok struct {
		Token string `json:"token"`
		Info  struct {
			ID string `json:"id"`
		} `json:"info"`
	}
	if err := c.json(&tok, "user", "token", "create", "alice", "--ttl", "1h", "--description", "laptop"); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(c.dir, "alice-cfg")
	as := func(args ...string) (string, string, int) {
		return c.cliIn(c.lab.ctl, []string{"XDG_CONFIG_HOME=" + home, "CORPUS_ENV=", "CORPUS_ADDR=", "CORPUS_TOKEN=", "CORPUS_CA_CERT="}, args...)
	}
	if out, errOut, code := as("--address", c.api, "--token", tok.Token, "--ca-cert", c.ca, "login", "--as", "prod"); code != 0 || !strings.Contains(out, "as user:alice") {
		t.Fatalf("login = %d %s %s", code, out, errOut)
	}
	if out, _, code := as("status"); code != 0 || !strings.Contains(out, "you are user:alice") {
		t.Errorf("status as alice = %d %s", code, out)
	}
	if _, errOut, code := as("guest", "create", "x", "--image", "busybox"); code == 0 || !strings.Contains(errOut, "may not call") {
		t.Errorf("guest create as a dev = %d %s", code, errOut)
	}
	if _, errOut, code := as("audit"); code == 0 || !strings.Contains(errOut, "may not call") {
		t.Errorf("audit as a dev = %d %s", code, errOut)
	}
	c.mustCLI("user", "token", "revoke", tok.Info.ID)
	if _, errOut, code := as("status"); code == 0 || !strings.Contains(errOut, "not accepted") {
		t.Errorf("status with a revoked token = %d %s", code, errOut)
	}
	if out := c.mustCLI("audit", "--action", "revoke_user_token"); !strings.Contains(out, "ops") {
		t.Errorf("the revoke is not in the audit log:\n%s", out)
	}
}

// TestCertificateRotation: with short-lived certificates the agent and
// the coordinator renew theirs while the node stays ready, calls keep
// working, the replaced certificate goes out of use, and both daemons'
// expiry gauges move.
func TestCertificateRotation(t *testing.T) {
	c := newCluster(t, "--cert-ttl", "30s")
	a := c.addAgent("n1")
	// Each daemon serves its metrics on its namespace's loopback.
	expiresAt := func(ns, addr, component, cert string) float64 {
		t.Helper()
		v, ok := metricstest.Exposed(t, scrapeWith(t, httpIn(ns), "http://"+addr+"/metrics"),
			"corpus_certificate_expiry_timestamp_seconds", "component", component, "certificate", cert)
		if !ok {
			t.Fatalf("%s serves no corpus_certificate_expiry_timestamp_seconds{certificate=%q}", component, cert)
		}
		return v
	}
	nodeExpiry := func() float64 { return expiresAt(a.node.ns, "127.0.0.1:9465", "agent", "node") }
	replicaExpiry := func() float64 { return expiresAt(c.lab.ctl, "127.0.0.1:9464", "coordinator", "replica") }
	nodeBefore, replicaBefore := nodeExpiry(), replicaExpiry()
	c.mustCLI("guest", "create", "rot", "--image", "busybox", "--memory", "64M", "--cpus", "0.1")
	serials := func() (cur, prev string) {
		var n struct {
			Node struct {
				Node struct {
					Status         string `json:"status"`
					CertSerial     string `json:"cert_serial"`
					PrevCertSerial string `json:"prev_cert_serial"`
				} `json:"node"`
			} `json:"node"`
		}
		if err := c.json(&n, "node", "show", "n1"); err != nil {
			t.Fatalf("node show during rotation: %v", err)
		}
		if n.Node.Node.Status != "ready" {
			t.Fatalf("node n1 is %q during rotation, want ready throughout", n.Node.Node.Status)
		}
		return n.Node.Node.CertSerial, n.Node.Node.PrevCertSerial
	}
	first, _ := serials()
	if first == "" {
		t.Fatal("node n1 has no certificate serial")
	}
	// Renewal is due after 20 s of the 30 s: poll through it.
	deadline := time.Now().Add(testrun.D(40 * time.Second))
	for {
		cur, prev := serials()
		if cur != first {
			if prev != first {
				t.Errorf("after renewal: serial %s, previous %s; want the previous to be the first (%s)", cur, prev, first)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node n1 still has its first certificate %s after 40s of a 30s lifetime", first)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The coordinator reaches the agent (its own certificate renewed
	// too), and the agent serves with its new one.
	eventually(t, 20*time.Second, "exec after renewal", func() error {
		out, errOut, code := c.cli("guest", "exec", "rot", "--", "echo", "still-here")
		if code != 0 || out != "still-here\n" {
			return fmt.Errorf("exit %d: %s %s", code, out, errOut)
		}
		return nil
	})
	// Each renews on its own schedule: the replica's next renewal may
	// come a little after the node's.
	eventually(t, 30*time.Second, "both expiry gauges moved", func() error {
		if got := nodeExpiry(); got <= nodeBefore {
			return fmt.Errorf("the agent's expiry timestamp{node} = %v, want past %v", got, nodeBefore)
		}
		if got := replicaExpiry(); got <= replicaBefore {
			return fmt.Errorf("the coordinator's expiry timestamp{replica} = %v, want past %v", got, replicaBefore)
		}
		return nil
	})
	if log := c.agents["n1"].log.String(); !strings.Contains(log, "node certificate renewed") {
		t.Errorf("the agent's log does not show a renewal")
	}
	if log := c.coord.log.String(); !strings.Contains(log, "renewed this replica's certificate") {
		t.Errorf("the coordinator's log does not show its own renewal")
	}
}
