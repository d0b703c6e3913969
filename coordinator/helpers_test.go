package coordinator_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator"
	"corpus/coordinator/state"
	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// waitTimeout bounds every wait on a condition.
var waitTimeout = testrun.D(15 * time.Second)

// server is a coordinator running in this process.
type server struct {
	*coordinator.Server
	t      *testing.T
	dir    string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// start runs a one-replica coordinator on dir with dynamic ports and waits
// until it leads and the cluster is bootstrapped.
func start(t *testing.T, dir string, opts ...func(*coordinator.Config)) *server {
	t.Helper()
	s := launch(t, dir, opts...)
	s.waitLeader()
	return s
}

// launch runs a coordinator on dir (dynamic ports unless opts set them)
// without waiting for it to lead; it is stopped when the test ends.
func launch(t *testing.T, dir string, opts ...func(*coordinator.Config)) *server {
	t.Helper()
	cfg := coordinator.Default()
	cfg.DataDir = dir
	cfg.APIAddr = "127.0.0.1:0"
	cfg.RaftAddr = "127.0.0.1:0"
	cfg.DNS.Addr = "127.0.0.1:0"
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.Logger = testLogger(t)
	// A test's nodes report when the test says, not every few seconds,
	// so the heartbeat deadline is scaled like every other deadline of a
	// test: at load 30 its nodes went down mid-test and their guests moved
	// (the tests of liveness set their own).
	cfg.NodeTimeout = testrun.D(cfg.NodeTimeout)
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := coordinator.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{Server: srv, t: t, dir: dir, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("Serve() = %v, want nil after a clean stop", err)
		}
	})
	return s
}

// stop ends Serve and returns its error; it is safe to call twice.
func (s *server) stop() error {
	s.once.Do(func() {
		s.cancel()
		select {
		case s.err = <-s.done:
		case <-time.After(testrun.D(waitTimeout)):
			// What every goroutine was doing says which part hung.
			var stacks strings.Builder
			pprof.Lookup("goroutine").WriteTo(&stacks, 2)
			s.t.Logf("goroutines when Serve did not return:\n%s", stacks.String())
			s.err = errors.New("Serve did not return")
		}
	})
	return s.err
}

func (s *server) url() string { return "https://" + s.APIAddr() }

// caPool trusts the coordinator's cluster CA.
func (s *server) caPool() *x509.CertPool {
	cas, err := pki.ParseCerts(s.CACert())
	if err != nil {
		s.t.Fatalf("cluster CA: %v", err)
	}
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca)
	}
	return p
}

// issue signs a certificate of role and id with the cluster CA, as a
// replica does (it reads the CA from the data dir).
func (s *server) issue(role, id string, ttl time.Duration) *tls.Certificate {
	s.t.Helper()
	return issueFrom(s.t, filepath.Join(s.dir, coordinator.TLSDir), role, id, ttl)
}

// issueFrom signs a certificate with the CA in dir (ca.crt, ca.key).
func issueFrom(t *testing.T, dir, role, id string, ttl time.Duration) *tls.Certificate {
	t.Helper()
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c, k, _, err := ca.IssueKeyPair(pki.Request{Role: role, ID: id, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	kp, err := pki.KeyPair(c, k, certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// waitLeader polls /healthz until this replica leads, then Status until
// the cluster config is applied (the operator token works).
func (s *server) waitLeader() {
	s.t.Helper()
	deadline := time.Now().Add(testrun.D(waitTimeout))
	hc := rpc.HTTPClient(pki.ClientConfig(s.caPool(), nil, pki.RoleCoordinator, ""))
	ops := s.clients(s.OpsToken())
	var last string
	for ; time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var health struct {
			Leader   string `json:"leader"`
			IsLeader bool   `json:"is_leader"`
		}
		res, err := hc.Get(s.url() + "/healthz")
		if err != nil {
			last = err.Error()
			continue
		}
		err = json.NewDecoder(res.Body).Decode(&health)
		res.Body.Close()
		if err != nil || !health.IsLeader {
			last = "not leading yet"
			continue
		}
		st, err := ops.cluster.Status(context.Background(), connect.NewRequest(&corpusv1.StatusRequest{}))
		if err != nil || st.Msg.ClusterId == "" {
			last = "not bootstrapped yet: " + errString(err)
			continue
		}
		return
	}
	s.t.Fatalf("coordinator on %s did not lead within %v: %s", s.APIAddr(), waitTimeout, last)
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// waitFor blocks until cond holds for the server's state, or fails the
// test after a deadline. cond reads through the view, so its reads are
// watched and no polling is needed.
func (s *server) waitFor(what string, cond func(v *state.Snap) bool) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(waitTimeout))
	defer cancel()
	for {
		v := s.Store().Read()
		if cond(v) {
			return
		}
		if err := v.Wait(ctx); err != nil {
			s.t.Fatalf("waiting for %s: %v", what, err)
		}
	}
}

// clients are API clients speaking with one credential.
type clients struct {
	cluster corpusv1connect.ClusterServiceClient
	nodes   corpusv1connect.NodeServiceClient
	guests  corpusv1connect.GuestServiceClient
	ingress corpusv1connect.IngressServiceClient
	dns     corpusv1connect.DnsServiceClient
	volumes corpusv1connect.VolumeServiceClient
	agent   corpusv1connect.AgentServiceClient
	users   corpusv1connect.UserServiceClient
	project corpusv1connect.ProjectServiceClient
	audit   corpusv1connect.AuditServiceClient
	service corpusv1connect.ServiceServiceClient
	ext     corpusv1connect.ExtensionServiceClient
	snap    corpusv1connect.SnapshotServiceClient
	reg     corpusv1connect.RegistryServiceClient
}

// clients returns clients presenting token ("" for none).
func (s *server) clients(token string) clients { return s.clientsAs(nil, token) }

// clientsAs returns clients presenting a certificate (nil for none) and
// a token ("" for none), trusting the cluster CA.
func (s *server) clientsAs(cert *tls.Certificate, token string) clients {
	var keys *pki.Keys
	if cert != nil {
		keys = pki.NewKeys(cert)
	}
	return clientsAt(rpc.HTTPClient(pki.ClientConfig(s.caPool(), keys, pki.RoleCoordinator, "")), s.url(), token)
}

// clientsAt returns clients of the API at url over hc presenting token.
func clientsAt(hc *http.Client, url, token string) clients {
	// Like the CLI, clients wait out an election (the CLI waits 10 s;
	// scaled here like every fixed deadline: on a loaded machine an
	// election takes longer).
	opt := connect.WithInterceptors(rpc.Bearer(token), rpc.RetryWithoutLeader(testrun.D(10*time.Second)))
	return clients{
		cluster: corpusv1connect.NewClusterServiceClient(hc, url, opt),
		nodes:   corpusv1connect.NewNodeServiceClient(hc, url, opt),
		guests:  corpusv1connect.NewGuestServiceClient(hc, url, opt),
		ingress: corpusv1connect.NewIngressServiceClient(hc, url, opt),
		dns:     corpusv1connect.NewDnsServiceClient(hc, url, opt),
		volumes: corpusv1connect.NewVolumeServiceClient(hc, url, opt),
		users:   corpusv1connect.NewUserServiceClient(hc, url, opt),
		project: corpusv1connect.NewProjectServiceClient(hc, url, opt),
		audit:   corpusv1connect.NewAuditServiceClient(hc, url, opt),
		agent:   corpusv1connect.NewAgentServiceClient(hc, url, opt),
		ext:     corpusv1connect.NewExtensionServiceClient(hc, url, opt),
		service: corpusv1connect.NewServiceServiceClient(hc, url, opt),
		snap:    corpusv1connect.NewSnapshotServiceClient(hc, url, opt),
		reg:     corpusv1connect.NewRegistryServiceClient(hc, url, opt),
	}
}

func (s *server) ops() clients { return s.clients(s.OpsToken()) }

// joinToken creates a join token as the operator.
func (s *server) joinToken() string {
	s.t.Helper()
	return s.joinTokenAs(s.OpsToken())
}

// joinTokenAs creates a join token with operator token ops: a replica
// of a group holds the token only if it bootstrapped the group.
func (s *server) joinTokenAs(ops string) string {
	s.t.Helper()
	res, err := s.clients(ops).nodes.CreateJoinToken(context.Background(), connect.NewRequest(&corpusv1.CreateJoinTokenRequest{}))
	if err != nil {
		s.t.Fatalf("CreateJoinToken() = %v", err)
	}
	return res.Msg.Token
}

// capacity and drivers are what test agents report.
func capacity() *corpusv1.Resources {
	return &corpusv1.Resources{MemoryBytes: 8 << 30, CpuMillis: 4000, DiskBytes: 100 << 30}
}

func drivers() []*corpusv1.DriverInfo {
	return []*corpusv1.DriverInfo{{Name: "lxc", Healthy: true, Exec: true, Attributes: map[string]string{"version": "6"}, PackageImages: []string{"debian/bookworm"}}}
}

// agent is an enrolled node as its agent sees it.
type agent struct {
	id, name string
	// cert is its current node certificate, first the one it got at
	// enrollment.
	cert, first *tls.Certificate
	s           *server
	// agentKey is what coordinators present to the agent's own API.
	agentKey string
	// address is the agent API address it reports.
	address string
	clients
}

// enroll enrolls a node named name with a fresh join token.
func (s *server) enroll(name string) *agent {
	s.t.Helper()
	return s.enrollAs(s.OpsToken(), name)
}

// enrollAs is enroll with a join token made with operator token ops.
func (s *server) enrollAs(ops, name string) *agent {
	s.t.Helper()
	keyPEM, csrPEM, err := pki.NewKeyAndCSR(name)
	if err != nil {
		s.t.Fatal(err)
	}
	res, err := s.clients("").agent.Enroll(context.Background(), connect.NewRequest(&corpusv1.EnrollRequest{
		JoinToken: s.joinTokenAs(ops), Name: name, Capacity: capacity(), Drivers: drivers(), AgentAddress: "127.0.0.1:1", AgentVersion: "test",
		CsrPem: csrPEM,
	}))
	if err != nil {
		s.t.Fatalf("Enroll(%s) = %v", name, err)
	}
	cert, err := pki.KeyPair(res.Msg.CertificatePem, keyPEM, res.Msg.CaPem)
	if err != nil {
		s.t.Fatalf("Enroll(%s) returned an unusable certificate: %v", name, err)
	}
	return &agent{id: res.Msg.NodeId, name: name, cert: cert, first: cert, s: s, agentKey: res.Msg.AgentKey, address: "127.0.0.1:1", clients: s.clientsAs(cert, "")}
}

// renew trades the agent's certificate for a new one, as the agent does
// before it expires.
func (a *agent) renew(t *testing.T) {
	t.Helper()
	keyPEM, csrPEM, err := pki.NewKeyAndCSR(a.name)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.agent.RenewCertificate(context.Background(), connect.NewRequest(&corpusv1.RenewCertificateRequest{CsrPem: csrPEM}))
	if err != nil {
		t.Fatalf("RenewCertificate(%s) = %v", a.name, err)
	}
	cert, err := pki.KeyPair(res.Msg.CertificatePem, keyPEM, res.Msg.CaPem)
	if err != nil {
		t.Fatalf("RenewCertificate(%s) returned an unusable certificate: %v", a.name, err)
	}
	a.cert = cert
	a.clients = a.s.clientsAs(cert, "")
}

// report sends the agent's facts and the given observations.
func (a *agent) report(t *testing.T, observed ...*corpusv1.ReportedGuest) {
	t.Helper()
	_, err := a.agent.Report(context.Background(), connect.NewRequest(&corpusv1.ReportRequest{
		Capacity: capacity(), Drivers: drivers(), AgentAddress: a.address, AgentVersion: "test", Guests: observed,
	}))
	if err != nil {
		t.Fatalf("Report(%s) = %v", a.name, err)
	}
}

func observed(guestID, st string) *corpusv1.ReportedGuest {
	return &corpusv1.ReportedGuest{GuestId: guestID, Observed: &corpusv1.GuestObserved{State: st, Pid: 7}}
}

// codeOf is the connect code of err, or 0 for nil.
func codeOf(err error) connect.Code {
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

// testLogger logs to t until the test ends.
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	mu     sync.Mutex
	t      *testing.T
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// userToken creates a user of a role (once) and returns a new token of
// theirs; ttl 0 means the default.
func (s *server) userToken(name, role string, ttl time.Duration) string {
	s.t.Helper()
	ctx := context.Background()
	ops := s.ops()
	if _, err := ops.users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: name, Role: role})); err != nil {
		s.t.Fatalf("CreateUser(%s) = %v", name, err)
	}
	res, err := ops.users.CreateToken(ctx, connect.NewRequest(&corpusv1.CreateTokenRequest{User: name, TtlSeconds: int64(ttl / time.Second)}))
	if err != nil {
		s.t.Fatalf("CreateToken(%s) = %v", name, err)
	}
	return res.Msg.Token
}

// revokedToken returns a token of a dev user that was revoked.
func (s *server) revokedToken(name string) string {
	s.t.Helper()
	tok := s.userToken(name, "dev", 0)
	id := strings.Split(strings.TrimPrefix(tok, "cusr_"), "_")[0]
	if _, err := s.ops().users.RevokeToken(context.Background(), connect.NewRequest(&corpusv1.RevokeTokenRequest{Id: id})); err != nil {
		s.t.Fatalf("RevokeToken = %v", err)
	}
	return tok
}
