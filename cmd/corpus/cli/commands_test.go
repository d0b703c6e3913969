package cli

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/crypto/ssh"

	"corpus/client"
	"corpus/coordinator"
	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// cliTarget is a coordinator running in this process and the flags that
// point the CLI at it as the operator.
type cliTarget struct {
	t      *testing.T
	addr   string
	ops    *client.Clients
	ca     []byte // the cluster CA (PEM)
	caFile string
	flags  []string
}

// startCoordinator runs a one-replica coordinator with dynamic ports (DNS
// off) until the test ends, and waits until it serves.
func startCoordinator(t *testing.T, opts ...func(*coordinator.Config)) *cliTarget {
	t.Helper()
	cfg := coordinator.Default()
	cfg.DataDir = t.TempDir()
	cfg.APIAddr, cfg.RaftAddr, cfg.DNS.Addr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "", "127.0.0.1:0"
	cfg.Logger = slog.New(slog.DiscardHandler)
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := coordinator.New(cfg)
	if err != nil {
		t.Fatalf("coordinator.New() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve() = %v, want nil after a clean stop", err)
		}
	})
	caFile := filepath.Join(cfg.DataDir, coordinator.TLSDir, coordinator.CACertFile)
	g := &Globals{Target: client.Target{Address: srv.APIAddr(), Token: srv.OpsToken(), CAFile: caFile}}
	c, err := g.Clients()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return &cliTarget{t: t, addr: srv.APIAddr(), ops: c, ca: srv.CACert(), caFile: caFile,
		flags: []string{"--address", srv.APIAddr(), "--token", srv.OpsToken(), "--ca-cert", caFile, "--config-file", filepath.Join(t.TempDir(), "config.yaml")}}
}

// run runs one corpus command line with stdin and returns its stdout.
func (c *cliTarget) run(stdin string, args ...string) (string, error) {
	c.t.Helper()
	var stdout, stderr bytes.Buffer
	root := NewRoot(&Globals{stdout: &stdout, stderr: &stderr})
	root.SetArgs(append(append([]string{}, c.flags...), args...))
	root.SetIn(strings.NewReader(stdin))
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(30*time.Second))
	defer cancel()
	err := root.ExecuteContext(ctx)
	return stdout.String(), err
}

// want runs a command line and fails the test unless it succeeds with
// every one of parts in its stdout.
func (c *cliTarget) want(args string, parts ...string) string {
	c.t.Helper()
	out, err := c.run("", strings.Fields(args)...)
	if err != nil {
		c.t.Fatalf("corpus %s = %v, want success", args, err)
	}
	for _, p := range parts {
		if !strings.Contains(out, p) {
			c.t.Errorf("corpus %s printed:\n%s\nwant it to contain %q", args, out, p)
		}
	}
	return out
}

// wantErr runs a command line and fails the test unless it fails with
// part in its error.
func (c *cliTarget) wantErr(args, part string) {
	c.t.Helper()
	out, err := c.run("", strings.Fields(args)...)
	if err == nil || !strings.Contains(describe(err), part) {
		c.t.Errorf("corpus %s = %q, %v; want an error with %q", args, out, err, part)
	}
}

// TestUserKeyProjectCommands drives the user, key, project, release and
// rollback commands against a real coordinator with no nodes.
func TestUserKeyProjectCommands(t *testing.T) {
	c := startCoordinator(t)

	c.want("user add alice", "user alice (dev) added")
	c.want("user add alice", "user alice (dev) already exists (same role), unchanged")
	c.wantErr("user add alice --role ops", "already exists with another role")
	c.wantErr("user add bob --role admin", `role "admin": use ops, dev or viewer`)
	c.want("user add bob --role viewer", "user bob (viewer) added")
	c.want("user list", "NAME", "alice", "bob", "viewer")

	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	fp := ssh.FingerprintSHA256(sk)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "id_ed25519.pub")
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sk))) + " alice@laptop"
	if err := os.WriteFile(keyFile, []byte("\n"+line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(private, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.want("key add alice "+keyFile, "key "+fp+" (alice@laptop) added to user alice")
	c.want("key add alice "+keyFile, "key "+fp+" already belongs to user alice, unchanged")
	c.wantErr("key add alice "+private, "give "+keyFile+" instead")
	if out, err := c.run(line+"\n", "key", "add", "bob", "-"); err == nil || !strings.Contains(describe(err), "already belongs to user alice") {
		t.Errorf("corpus key add bob - (alice's key) = %q, %v; want an error naming alice", out, err)
	}
	c.want("key list", "USER", "alice", fp, "alice@laptop")
	c.want("user list", "alice  dev     1")
	if out := c.want("key list bob"); strings.Contains(out, fp) {
		t.Errorf("corpus key list bob printed alice's key:\n%s", out)
	}
	c.wantErr("key list carol", `user "carol" is not in the cluster`)
	var listed struct {
		Users []struct {
			Name string `json:"name"`
		} `json:"users"`
	}
	if err := json.Unmarshal([]byte(c.want("--json key list alice")), &listed); err != nil || len(listed.Users) != 1 || listed.Users[0].Name != "alice" {
		t.Errorf("corpus --json key list alice = %+v, %v; want alice alone", listed, err)
	}

	c.wantErr("project create hello --cpus lots", "--cpus")
	c.want("project create hello --detach --domain hello.example.test")
	c.want("project create hello --detach --domain hello.example.test")
	c.wantErr("project create hello --detach --branch other", "already has a dev environment with other settings")
	// No node can run the guest, so waiting ends at once, saying why.
	c.wantErr("project create hello --domain hello.example.test", "guest hello-dev is pending")
	c.want("project list", "hello", "dev", "hello.example.test")
	c.want("project show hello", "Env dev:", "hello-dev", "Branch:", "main", "hello.example.test -> guest port 80", "Git remote:")
	c.want("project grant hello alice", "user alice may use project hello (members: alice)")
	c.want("project grant hello bob", "(members: alice, bob)")
	c.want("project revoke hello alice", "user alice no longer may use project hello (members: bob)")
	c.wantErr("project grant hello carol", "carol")

	c.want("release list hello", "ID", "SOURCE", "SUBJECT")
	c.wantErr("deploy hello --image busybox", "not an OCI reference")
	c.wantErr("deploy hello --image registry.example/Site:1", "registry.example/Site:1")
	c.wantErr("project create site --image registry.example/site:1 --detach", "drop --detach")
	c.wantErr("release show hello rx", `release "rx": write it as r3 or 3`)
	c.wantErr("release show hello r1", "r1")
	c.wantErr("rollback hello --to x", `--to: release "x"`)
	c.wantErr("rollback hello --env prod", "prod")
	c.wantErr("rollback hello", "no kept good release")

	c.want("key delete alice "+fp, "key "+fp+" deleted from user alice")
	c.want("user delete alice", "user alice deleted (with 0 SSH keys)")
	c.wantErr("user delete alice", "alice")
	c.want("project delete hello --env dev --yes", "project hello/dev deleted")
	if out := c.want("project list"); strings.Contains(out, "hello") {
		t.Errorf("corpus project list after the delete printed:\n%s", out)
	}
}

// fakeAgent enrolls node vm through the agent API, reports a git endpoint
// at 10.0.0.1:2222, and reports every guest placed on it as running until
// ctx ends; ready is closed once the node is ready. It stands in for a
// real agent, which needs LXC.
func (c *cliTarget) fakeAgent(ctx context.Context, ready chan<- struct{}) error {
	return c.fakeNode(ctx, "vm", ready)
}

// fakeNode is fakeAgent for a node of another name.
func (c *cliTarget) fakeNode(ctx context.Context, name string, ready chan<- struct{}) error {
	join, err := c.ops.Nodes.CreateJoinToken(ctx, connect.NewRequest(&corpusv1.CreateJoinTokenRequest{}))
	if err != nil {
		return err
	}
	keyPEM, csrPEM, err := pki.NewKeyAndCSR(name)
	if err != nil {
		return err
	}
	ca, err := pki.ParseCert(c.ca)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	base := "https://" + c.addr
	capacity := &corpusv1.Resources{MemoryBytes: 8 << 30, CpuMillis: 4000, DiskBytes: 100 << 30}
	drivers := []*corpusv1.DriverInfo{{Name: "lxc", Healthy: true, Exec: true, IdRanges: 100}}
	res, err := corpusv1connect.NewAgentServiceClient(rpc.HTTPClient(pki.ClientConfig(pool, nil, pki.RoleCoordinator, "")), base).Enroll(ctx, connect.NewRequest(&corpusv1.EnrollRequest{
		JoinToken: join.Msg.Token, Name: name, Capacity: capacity, Drivers: drivers, AgentAddress: "127.0.0.1:1", AgentVersion: "test", CsrPem: csrPEM,
	}))
	if err != nil {
		return err
	}
	cert, err := pki.KeyPair(res.Msg.CertificatePem, keyPEM, res.Msg.CaPem)
	if err != nil {
		return err
	}
	agent := corpusv1connect.NewAgentServiceClient(rpc.HTTPClient(pki.ClientConfig(pool, pki.NewKeys(cert), pki.RoleCoordinator, "")), base)
	report := &corpusv1.ReportRequest{Capacity: capacity, Drivers: drivers, AgentAddress: "127.0.0.1:1", AgentVersion: "test", Address: "10.0.0.1", GitPort: 2222}
	if _, err := agent.Report(ctx, connect.NewRequest(report)); err != nil {
		return err
	}
	close(ready)
	stream, err := agent.Watch(ctx, connect.NewRequest(&corpusv1.WatchRequest{}))
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
		report.Guests = nil
		for _, g := range stream.Msg().Guests {
			report.Guests = append(report.Guests, &corpusv1.ReportedGuest{GuestId: g.Id, Observed: &corpusv1.GuestObserved{State: corpusv1.ObservedRunning, Pid: 7}})
		}
		if _, err := agent.Report(ctx, connect.NewRequest(report)); err != nil {
			return err
		}
	}
	return stream.Err()
}

// startNodes runs fake agents for the named nodes until the test ends.
func (c *cliTarget) startNodes(names ...string) {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	c.t.Cleanup(func() { cancel(); wg.Wait() })
	for _, name := range names {
		ready, done := make(chan struct{}), make(chan error, 1)
		wg.Add(1)
		go func() { defer wg.Done(); done <- c.fakeNode(ctx, name, ready) }()
		select {
		case <-ready:
		case err := <-done:
			c.t.Fatalf("fake agent %s: %v", name, err)
		}
	}
}

// TestNodeModeAndDrain: node mode sets modes and eligibility, and drain
// follows the moves until the node is empty, or says what stays.
func TestNodeModeAndDrain(t *testing.T) {
	c := startCoordinator(t)
	c.startNodes("vm", "vm2")
	c.want("guest create web --image busybox --memory 64M", "guest web is running on node vm")
	c.wantErr("node mode vm sideways", `node mode "sideways": use dev, staging, prod, drain, eligible or ineligible`)
	c.wantErr("node mode nope prod", `node "nope"`)
	c.want("node mode vm drain --deadline 30s", "node vm is drained: nothing is left on it")
	c.want("guest show web", "Node:       vm2", "ID range:   1 of its node's", "migrating", "migrated")
	c.want("node mode vm prod", "node vm is now in mode prod")
	c.want("node mode vm prod", "node vm already was in mode prod")
	c.want("computenode_switchmode vm ineligible", "node vm is now in mode prod,ineligible")
	c.want("computenode_list", "vm    ready   prod,ineligible")
	c.want("computenode_infos vm", "Mode:      prod,ineligible")

	// vm takes nothing new: web cannot move off vm2, and db's data stays.
	c.want("guest create db --image busybox --memory 64M --volume 64M", "guest db is running on node vm2")
	c.wantErr("node mode vm2 drain --deadline 2s", "node vm2 is not drained after 2s (2 guests left)")
	out, _ := c.run("", "node", "mode", "vm2", "drain", "--deadline", "2s")
	for _, want := range []string{"web: waiting for a node: no node fits (1 considered): 1 node ineligible", "db: stays: its volume db"} {
		if !strings.Contains(out, want) {
			t.Errorf("corpus node mode vm2 drain printed:\n%s\nwant it to contain %q", out, want)
		}
	}
	c.want("node mode vm eligible", "node vm is now in mode prod")
	c.wantErr("node mode vm2 drain --deadline 30s", "node vm2 still holds 1 guests with a volume")
	c.want("guest list", "web", "vm ")

	c.wantErr("guest create api --image busybox --constraint zone", `--constraint "zone": want LABEL=VALUE`)
	c.wantErr("guest create api --image busybox --constraint mode=prod", "mode is not a label")
	c.wantErr("guest create api --image busybox --constraint zone=a", "1 node without label zone=a")
	c.want("guest show api", "Constraints:  zone=a")
}

// TestProjectCreateWaits: project create follows the guest until it runs,
// then prints the environment's git remote.
func TestProjectCreateWaits(t *testing.T) {
	c := startCoordinator(t)
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- c.fakeAgent(ctx, ready) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("fake agent: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("fake agent: %v", err)
	}
	c.want("project create hello --domain hello.example.test",
		"project hello/dev is running on node vm; push main to deploy:\ngit remote add corpus ssh://git@10.0.0.1:2222/hello\n")
	// A node takes the environments of its mode: vm takes prod from now
	// on, and hello/dev stays where it runs.
	if _, err := c.ops.Nodes.SetNodeMode(ctx, connect.NewRequest(&corpusv1.SetNodeModeRequest{Name: "vm", Mode: "prod"})); err != nil {
		t.Fatalf("SetNodeMode(vm, prod) = %v", err)
	}
	c.want("project create hello --env prod --branch release",
		"project hello/prod is running on node vm; push release to deploy:\ngit remote add corpus-prod ssh://git@10.0.0.1:2222/hello/prod\n")
	c.want("project list", "hello  dev   vm    running", "hello  prod  vm    running")
	c.want("project show hello", "hello-prod, running on node vm", "Git remote:  ssh://git@10.0.0.1:2222/hello/dev")
}
