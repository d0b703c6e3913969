package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEnrollment: a join token works once; reused, wrong or garbage tokens
// and invalid node names are refused with a clear error, creating nothing.
func TestEnrollment(t *testing.T) {
	c := newCluster(t)
	tok := strings.TrimSpace(c.mustCLI("node", "token"))

	enroll := func(name, token string) (string, int) {
		dir := filepath.Join(c.dir, "enroll-"+name)
		p := startIn(t, c.lab.ctl, "agent "+name, nil, "agent", "--state-dir", dir, "--coordinator", c.api,
			"--name", name, "--api-addr", "127.0.0.1:0", "--git-addr", "127.0.0.1:0", "--join-token", token, "--drivers", "lxc", "--network=false")
		select {
		case <-p.done:
			return p.log.String(), p.cmd.ProcessState.ExitCode()
		case <-time.After(10 * time.Second):
			return p.log.String(), -1 // still running: enrolled
		}
	}
	if _, code := enroll("first", tok); code != -1 {
		t.Fatalf("enrolling with a fresh token exited %d, want it to keep running", code)
	}
	for _, tc := range []struct{ name, node, token, want string }{
		{"reused token", "second", tok, "join token is invalid"},
		{"wrong secret", "third", strings.Split(tok, ".")[0] + ".deadbeef", "join token is invalid"},
		{"garbage", "fourth", "garbage", "join token is invalid"},
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
		return c.cliIn(c.lab.ctl, []string{"XDG_CONFIG_HOME=" + home, "CORPUS_ENV=", "CORPUS_ADDR=", "CORPUS_TOKEN="}, args...)
	}
	if out, errOut, code := as("--address", c.api, "--token", tok.Token, "login", "--as", "prod"); code != 0 || !strings.Contains(out, "as user:alice") {
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
