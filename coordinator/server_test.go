package coordinator_test

import (
	"context"
	"crypto/x509"
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"corpus/coordinator"
	"corpus/coordinator/state"
	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*coordinator.Config)
		ok     bool
	}{
		{"default", func(*coordinator.Config) {}, true},
		{"no data dir", func(c *coordinator.Config) { c.DataDir = "" }, false},
		{"api address without port", func(c *coordinator.Config) { c.APIAddr = "127.0.0.1" }, false},
		{"raft address without port", func(c *coordinator.Config) { c.RaftAddr = "localhost" }, false},
		{"no replica id", func(c *coordinator.Config) { c.ReplicaID = "" }, false},
		{"zero node timeout", func(c *coordinator.Config) { c.NodeTimeout = 0 }, false},
		{"raft multiplier 11", func(c *coordinator.Config) { c.RaftMultiplier = 11 }, false},
		{"raft multiplier 5", func(c *coordinator.Config) { c.RaftMultiplier = 5 }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := coordinator.Default()
			tt.change(&cfg)
			if err := cfg.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate(%+v) = %v, want ok=%v", cfg, err, tt.ok)
			}
		})
	}
}

func TestStatusLeaderIsDialable(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	res, err := s.ops().cluster.Status(context.Background(), connect.NewRequest(&corpusv1.StatusRequest{}))
	if err != nil {
		t.Fatalf("Status() = %v", err)
	}
	_, port, err := net.SplitHostPort(res.Msg.Leader)
	if err != nil || port == "0" {
		t.Errorf("Status().Leader = %q, want the address the raft transport listens on", res.Msg.Leader)
	}
}

func TestEnroll(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	ctx := context.Background()
	anon := s.clients("")
	tok, tok2 := s.joinToken(), s.joinToken()
	tokID, _, _ := strings.Cut(tok, ".")
	tests := []struct {
		name      string
		req       *corpusv1.EnrollRequest
		want      connect.Code
		wantNodes int
	}{
		{"uppercase name", &corpusv1.EnrollRequest{JoinToken: tok, Name: "N1"}, connect.CodeInvalidArgument, 0},
		{"empty name", &corpusv1.EnrollRequest{JoinToken: tok}, connect.CodeInvalidArgument, 0},
		{"path name", &corpusv1.EnrollRequest{JoinToken: tok, Name: "../n1"}, connect.CodeInvalidArgument, 0},
		{"long name", &corpusv1.EnrollRequest{JoinToken: tok, Name: strings.Repeat("n", 64)}, connect.CodeInvalidArgument, 0},
		{"bad label", &corpusv1.EnrollRequest{JoinToken: tok, Name: "n1", Labels: map[string]string{"Rack": "a"}}, connect.CodeInvalidArgument, 0},
		{"bad label value", &corpusv1.EnrollRequest{JoinToken: tok, Name: "n1", Labels: map[string]string{"rack": "a b"}}, connect.CodeInvalidArgument, 0},
		{"bad mode", &corpusv1.EnrollRequest{JoinToken: tok, Name: "n1", Labels: map[string]string{"mode": "yolo"}}, connect.CodeInvalidArgument, 0},
		{"no token", &corpusv1.EnrollRequest{Name: "n1"}, connect.CodePermissionDenied, 0},
		{"garbage token", &corpusv1.EnrollRequest{JoinToken: "garbage", Name: "n1"}, connect.CodePermissionDenied, 0},
		{"unknown token", &corpusv1.EnrollRequest{JoinToken: "abc.def", Name: "n1"}, connect.CodePermissionDenied, 0},
		{"wrong secret", &corpusv1.EnrollRequest{JoinToken: tokID + ".0000", Name: "n1"}, connect.CodePermissionDenied, 0},
		{"no certificate request", &corpusv1.EnrollRequest{JoinToken: tok, Name: "n1"}, connect.CodeInvalidArgument, 0},
		{"garbage certificate request", &corpusv1.EnrollRequest{JoinToken: tok, Name: "n1", CsrPem: []byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n")}, connect.CodeInvalidArgument, 0},
		{"enrolls", &corpusv1.EnrollRequest{JoinToken: tok, Name: "n1", Labels: map[string]string{"mode": "prod", "rack": "a"}}, 0, 1},
		{"token reused", &corpusv1.EnrollRequest{JoinToken: tok, Name: "n2"}, connect.CodePermissionDenied, 1},
		{"name taken", &corpusv1.EnrollRequest{JoinToken: tok2, Name: "n1"}, connect.CodeAlreadyExists, 1},
		// The failed attempt above did not use up tok2.
		{"second node", &corpusv1.EnrollRequest{JoinToken: tok2, Name: "n2"}, 0, 2},
	}
	_, csr, err := pki.NewKeyAndCSR("n")
	if err != nil {
		t.Fatal(err)
	}
	// Steps, in order: each sees what the ones before it did.
	for _, tt := range tests {
		if tt.req.CsrPem == nil && tt.name != "no certificate request" {
			tt.req.CsrPem = csr
		}
		res, enrollErr := anon.agent.Enroll(ctx, connect.NewRequest(tt.req))
		if got := codeOf(enrollErr); got != tt.want {
			t.Fatalf("%s: Enroll(%v) = %v, want code %v", tt.name, tt.req, enrollErr, tt.want)
		}
		nodes, err := s.ops().nodes.ListNodes(ctx, connect.NewRequest(&corpusv1.ListNodesRequest{}))
		if err != nil {
			t.Fatalf("ListNodes() = %v", err)
		}
		if got := len(nodes.Msg.Nodes); got != tt.wantNodes {
			t.Fatalf("%s: len(ListNodes()) = %d, want %d", tt.name, got, tt.wantNodes)
		}
		if enrollErr != nil {
			continue
		}
		m := res.Msg
		if m.NodeId == "" || m.ClusterId == "" || m.AgentKey == "" {
			t.Errorf("%s: Enroll() = %v, want a node id, the cluster id and the agent key", tt.name, m)
		}
		cert, err := pki.ParseCert(m.CertificatePem)
		if err != nil {
			t.Fatalf("%s: Enroll() certificate: %v", tt.name, err)
		}
		if id, ok := pki.IdentityOf(cert); !ok || id.Role != pki.RoleNode || id.ID != m.NodeId {
			t.Errorf("%s: Enroll() certificate names %v, want node %s", tt.name, id, m.NodeId)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: s.caPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: Enroll() certificate does not verify with the cluster CA: %v", tt.name, err)
		}
		got, err := s.ops().nodes.GetNode(ctx, connect.NewRequest(&corpusv1.GetNodeRequest{Name: tt.req.Name}))
		if err != nil {
			t.Fatalf("%s: GetNode(%s) = %v", tt.name, tt.req.Name, err)
		}
		n := got.Msg.Node.Node
		if n.Id != m.NodeId || n.Status != state.NodeInitializing || n.CertSerial != cert.SerialNumber.Text(16) {
			t.Errorf("%s: GetNode(%s) = %v, want id %s, initializing, certificate serial %s", tt.name, tt.req.Name, n, m.NodeId, cert.SerialNumber.Text(16))
		}
	}
	n1, err := s.ops().nodes.GetNode(ctx, connect.NewRequest(&corpusv1.GetNodeRequest{Name: "n1"}))
	if err != nil {
		t.Fatalf("GetNode(n1) = %v", err)
	}
	if n := n1.Msg.Node.Node; n.Mode != "prod" || len(n.Labels) != 1 || n.Labels["rack"] != "a" {
		t.Errorf("GetNode(n1) = %v, want mode prod and labels {rack: a}", n)
	}
}

func TestCreateJoinTokenTTL(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	week := int64(7 * 24 * 3600)
	tests := []struct {
		ttl  int64
		want time.Duration // 0: refused
	}{
		{0, time.Hour},
		{60, time.Minute},
		{week, 7 * 24 * time.Hour},
		{-1, 0},
		{week + 1, 0},
		// ttl × 1s wraps around int64 to 0.29s.
		{18446744074, 0},
		{math.MaxInt64, 0},
		{math.MinInt64, 0},
	}
	for _, tt := range tests {
		res, err := s.ops().nodes.CreateJoinToken(context.Background(), connect.NewRequest(&corpusv1.CreateJoinTokenRequest{TtlSeconds: tt.ttl}))
		if tt.want == 0 {
			if codeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("CreateJoinToken(ttl %d) = %v, want %v", tt.ttl, err, connect.CodeInvalidArgument)
			}
			continue
		}
		if err != nil {
			t.Errorf("CreateJoinToken(ttl %d) = %v", tt.ttl, err)
			continue
		}
		info := res.Msg.Info
		if got := info.ExpiresAt.AsTime().Sub(info.CreatedAt.AsTime()); got != tt.want || info.SecretHash != "" {
			t.Errorf("CreateJoinToken(ttl %d) = %v, want it valid for %v and no secret hash", tt.ttl, info, tt.want)
		}
	}
}

func TestNodeReport(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	a := s.enroll("n1")
	a.report(t)
	res, err := s.ops().nodes.GetNode(context.Background(), connect.NewRequest(&corpusv1.GetNodeRequest{Name: "n1"}))
	if err != nil {
		t.Fatalf("GetNode(n1) = %v", err)
	}
	n := res.Msg.Node.Node
	if n.Status != state.NodeReady || !proto.Equal(n.Capacity, capacity()) || len(n.Drivers) != 1 || !proto.Equal(n.Drivers[0], drivers()[0]) {
		t.Errorf("GetNode(n1) after a report = %v, want ready with capacity %v and drivers %v", n, capacity(), drivers())
	}
	// GetNode also answers by id.
	if res, err := s.ops().nodes.GetNode(context.Background(), connect.NewRequest(&corpusv1.GetNodeRequest{Name: a.id})); err != nil || res.Msg.Node.Node.Name != "n1" {
		t.Errorf("GetNode(%s) = %v, %v, want node n1", a.id, res, err)
	}
	// The same report again changes nothing.
	before := s.Store().Read().Index()
	a.report(t)
	if after := s.Store().Read().Index(); after != before {
		t.Errorf("index after an unchanged report = %d, want %d", after, before)
	}
}

// waitGuest follows one guest with blocking GetGuest calls until cond
// holds for it.
func waitGuest(t *testing.T, s *server, name string, what string, cond func(*corpusv1.GetGuestResponse) bool) *corpusv1.GetGuestResponse {
	t.Helper()
	return waitGuestFrom(t, s, name, 0, what, cond)
}

// waitGuestFrom is waitGuest for changes after modify index min; with
// min > 0 it also sees the guest's deletion.
func waitGuestFrom(t *testing.T, s *server, name string, min uint64, what string, cond func(*corpusv1.GetGuestResponse) bool) *corpusv1.GetGuestResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(waitTimeout))
	defer cancel()
	for {
		res, err := s.ops().guests.GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: name, MinIndex: min, WaitSeconds: 5}))
		if err != nil {
			t.Fatalf("waiting for %s: GetGuest(%s, min index %d) = %v", what, name, min, err)
		}
		if cond(res.Msg) {
			return res.Msg
		}
		min = res.Msg.GetGuest().GetModifyIndex()
	}
}

// watcher is an agent's Watch stream.
type watcher struct {
	t      *testing.T
	stream interface {
		Receive() bool
		Msg() *corpusv1.WatchResponse
		Err() error
	}
}

func (a *agent) watch(t *testing.T) *watcher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testrun.D(4*waitTimeout))
	t.Cleanup(cancel)
	stream, err := a.agent.Watch(ctx, connect.NewRequest(&corpusv1.WatchRequest{}))
	if err != nil {
		t.Fatalf("Watch() as %s = %v", a.name, err)
	}
	t.Cleanup(func() { stream.Close() })
	return &watcher{t: t, stream: stream}
}

// next returns the first message for which cond holds.
func (w *watcher) next(what string, cond func(*corpusv1.WatchResponse) bool) *corpusv1.WatchResponse {
	w.t.Helper()
	for w.stream.Receive() {
		if m := w.stream.Msg(); cond(m) {
			return m
		}
	}
	w.t.Fatalf("Watch() ended while waiting for %s: %v", what, w.stream.Err())
	return nil
}

func desiredIs(name, desired string) func(*corpusv1.WatchResponse) bool {
	return func(m *corpusv1.WatchResponse) bool {
		for _, g := range m.Guests {
			if g.Name == name {
				return g.DesiredState == desired
			}
		}
		return false
	}
}

func TestCreateGuestRefusesInvalidRequests(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	valid := &corpusv1.GuestSpec{Image: "busybox"}
	tests := []struct {
		name  string
		guest string
		spec  *corpusv1.GuestSpec
	}{
		{"uppercase", "Web", valid},
		{"underscore", "a_b", valid},
		{"path", "../x", valid},
		{"empty", "", valid},
		{"64 characters", strings.Repeat("a", 64), valid},
		{"no image", "web", &corpusv1.GuestSpec{}},
		{"image with a space", "web", &corpusv1.GuestSpec{Image: "busybox latest"}},
		{"bad driver", "web", &corpusv1.GuestSpec{Image: "busybox", Driver: "LXC"}},
		{"too little memory", "web", &corpusv1.GuestSpec{Image: "busybox", Resources: &corpusv1.Resources{MemoryBytes: 1 << 20}}},
		{"negative cpu", "web", &corpusv1.GuestSpec{Image: "busybox", Resources: &corpusv1.Resources{CpuMillis: -1}}},
		{"bad env name", "web", &corpusv1.GuestSpec{Image: "busybox", Env: map[string]string{"1X": "y"}}},
		{"newline in env", "web", &corpusv1.GuestSpec{Image: "busybox", Env: map[string]string{"X": "a\nb"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := &corpusv1.CreateGuestRequest{Name: tt.guest, Spec: tt.spec}
			_, err := s.ops().guests.CreateGuest(context.Background(), connect.NewRequest(req))
			if codeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("CreateGuest(%v) = %v, want %v", req, err, connect.CodeInvalidArgument)
			}
		})
	}
	t.Cleanup(func() {
		// After the parallel subtests: none of them created anything.
		if got := s.Store().Read().Guests(); len(got) != 0 {
			t.Errorf("guests after invalid creates = %v, want none", got)
		}
	})
}

func TestGuestLifecycle(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	ctx := context.Background()
	ops := s.ops()
	a := s.enroll("n1")
	a.report(t)
	w := a.watch(t)
	w.next("the node ready", func(m *corpusv1.WatchResponse) bool { return m.Node.GetStatus() == state.NodeReady })

	// Create, and the scheduler places it.
	req := &corpusv1.CreateGuestRequest{Name: "web", Spec: &corpusv1.GuestSpec{Image: "busybox", Env: map[string]string{"PORT": "80"}}}
	created, err := ops.guests.CreateGuest(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatalf("CreateGuest(%v) = %v", req, err)
	}
	g := created.Msg.Guest
	if !created.Msg.Created || g.Id == "" || g.DesiredState != state.DesiredRunning || g.Spec.Driver != "lxc" || g.Spec.Resources.GetMemoryBytes() != 256<<20 {
		t.Errorf("CreateGuest(%v) = %v, want created, running, with the default driver and resources", req, created.Msg)
	}
	placed := waitGuest(t, s, "web", "web placed", func(r *corpusv1.GetGuestResponse) bool { return r.NodeName == "n1" })
	if placed.Status != "placed" || placed.Guest.NodeId != a.id {
		t.Errorf("GetGuest(web) = %v, want placed on %s", placed, a.id)
	}
	msg := w.next("web on the node", desiredIs("web", state.DesiredRunning))
	if len(msg.Guests) != 1 || msg.Index == 0 {
		t.Errorf("Watch() = %v, want one guest, an index", msg)
	}

	// Idempotent create.
	again, err := ops.guests.CreateGuest(ctx, connect.NewRequest(req))
	if err != nil || again.Msg.Created || again.Msg.Guest.GetId() != g.Id {
		t.Errorf("CreateGuest(%v) again = %v, %v, want created=false and the same guest", req, again, err)
	}
	other := proto.Clone(req).(*corpusv1.CreateGuestRequest)
	other.Spec.Image = "alpine"
	if _, err := ops.guests.CreateGuest(ctx, connect.NewRequest(other)); codeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("CreateGuest(%v) = %v, want %v", other, err, connect.CodeAlreadyExists)
	}

	// The agent reports it running.
	a.report(t, observed(g.Id, state.ObservedRunning))
	waitGuest(t, s, "web", "web running", func(r *corpusv1.GetGuestResponse) bool { return r.Status == state.ObservedRunning })

	// Desired state transitions.
	actions := []struct {
		name        string
		call        func(context.Context, *connect.Request[corpusv1.GuestActionRequest]) (*connect.Response[corpusv1.GuestActionResponse], error)
		wantChanged bool
		wantDesired string
	}{
		{"stop", ops.guests.StopGuest, true, state.DesiredStopped},
		{"stop again", ops.guests.StopGuest, false, state.DesiredStopped},
		{"start", ops.guests.StartGuest, true, state.DesiredRunning},
		{"start again", ops.guests.StartGuest, false, state.DesiredRunning},
		{"delete", ops.guests.DeleteGuest, true, state.DesiredDeleted},
		{"delete again", ops.guests.DeleteGuest, false, state.DesiredDeleted},
	}
	for _, tt := range actions {
		res, err := tt.call(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "web"}))
		if err != nil {
			t.Fatalf("%s web = %v", tt.name, err)
		}
		if res.Msg.Changed != tt.wantChanged || res.Msg.Guest.DesiredState != tt.wantDesired {
			t.Errorf("%s web = %v, want changed=%t and desired %s", tt.name, res.Msg, tt.wantChanged, tt.wantDesired)
		}
		if tt.wantChanged {
			w.next("web "+tt.wantDesired, desiredIs("web", tt.wantDesired))
		}
	}

	// Being deleted: it waits for the agent and refuses to come back.
	deleting := waitGuest(t, s, "web", "web deleting", func(r *corpusv1.GetGuestResponse) bool { return r.Status == "deleting" })
	if deleting.Guest.NodeId != a.id {
		t.Errorf("GetGuest(web) = %v, want it kept on its node until the agent reports it deleted", deleting)
	}
	if _, err := ops.guests.StartGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "web"})); codeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("StartGuest(web) while deleting = %v, want %v", err, connect.CodeFailedPrecondition)
	}
	if _, err := ops.guests.CreateGuest(ctx, connect.NewRequest(req)); codeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("CreateGuest(web) while deleting = %v, want %v", err, connect.CodeAlreadyExists)
	}

	// The agent reports it gone: the guest is removed.
	a.report(t, observed(g.Id, state.ObservedDeleted))
	waitGuestFrom(t, s, "web", deleting.Guest.ModifyIndex, "web deleted", func(r *corpusv1.GetGuestResponse) bool { return r.Deleted })
	if _, err := ops.guests.GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: "web"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("GetGuest(web) after deletion = %v, want %v", err, connect.CodeNotFound)
	}
	w.next("no guests", func(m *corpusv1.WatchResponse) bool { return len(m.Guests) == 0 })
	if _, err := ops.guests.StopGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "web"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("StopGuest(web) after deletion = %v, want %v", err, connect.CodeNotFound)
	}
}

func TestPendingGuest(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	ctx := context.Background()
	a := s.enroll("n1")
	a.report(t)
	req := &corpusv1.CreateGuestRequest{Name: "big", Spec: &corpusv1.GuestSpec{Image: "busybox", Resources: &corpusv1.Resources{MemoryBytes: 64 << 30}}}
	if _, err := s.ops().guests.CreateGuest(ctx, connect.NewRequest(req)); err != nil {
		t.Fatalf("CreateGuest(%v) = %v", req, err)
	}
	res := waitGuest(t, s, "big", "a pending reason", func(r *corpusv1.GetGuestResponse) bool { return r.Guest.PendingReason != "" })
	if res.Status != "pending" || !strings.Contains(res.Guest.PendingReason, "short of memory") {
		t.Errorf("GetGuest(big) = %v, want pending, short of memory", res)
	}
	// An unplaced guest is deleted at once: no agent has to confirm.
	del, err := s.ops().guests.DeleteGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "big"}))
	if err != nil || !del.Msg.Changed || del.Msg.Guest != nil {
		t.Errorf("DeleteGuest(big) = %v, %v, want changed and the guest gone", del, err)
	}
	if _, err := s.ops().guests.GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: "big"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("GetGuest(big) after deletion = %v, want %v", err, connect.CodeNotFound)
	}
}

func TestRestartKeepsState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	s := start(t, dir)
	opsToken := s.OpsToken()
	a := s.enroll("n1")
	a.report(t)
	used := s.joinToken() // consumed below
	unused := s.joinToken()
	if _, err := s.clients("").agent.Enroll(ctx, connect.NewRequest(&corpusv1.EnrollRequest{JoinToken: used, Name: "n2", CsrPem: testCSR(t)})); err != nil {
		t.Fatalf("Enroll(n2) = %v", err)
	}
	create := func(s *server, name string) {
		t.Helper()
		if _, err := s.ops().guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: name, Spec: &corpusv1.GuestSpec{Image: "busybox"}})); err != nil {
			t.Fatalf("CreateGuest(%s) = %v", name, err)
		}
		waitGuest(t, s, name, name+" placed", func(r *corpusv1.GetGuestResponse) bool { return r.NodeName == "n1" })
	}
	create(s, "web")
	// Part of the state comes back from a snapshot, part from the log.
	if err := s.Snapshot(); err != nil {
		t.Fatalf("Snapshot() = %v", err)
	}
	create(s, "api")
	if _, err := s.ops().guests.StopGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "api"})); err != nil {
		t.Fatalf("StopGuest(api) = %v", err)
	}
	want := s.Store().Read()
	wantIndex, wantGuests, wantNodes, wantConfig := want.Index(), want.Guests(), want.Nodes(), want.Config()
	if err := s.stop(); err != nil {
		t.Fatalf("Serve() = %v, want nil after a clean stop", err)
	}

	s = start(t, dir)
	if s.OpsToken() != opsToken {
		t.Errorf("OpsToken() after restart = %q, want the one in %s: %q", s.OpsToken(), coordinator.OpsTokenFile, opsToken)
	}
	if b, err := os.ReadFile(filepath.Join(dir, coordinator.OpsTokenFile)); err != nil || strings.TrimSpace(string(b)) != opsToken {
		t.Errorf("ReadFile(%s) = %q, %v, want the operator token", coordinator.OpsTokenFile, b, err)
	}
	s.waitFor("the log replayed", func(v *state.Snap) bool { return v.WatchIndex() >= wantIndex })
	got := s.Store().Read()
	if !proto.Equal(got.Config(), wantConfig) {
		t.Errorf("Config() after restart = %v, want %v", got.Config(), wantConfig)
	}
	if g := got.Guests(); len(g) != len(wantGuests) || !equalAll(g, wantGuests) {
		t.Errorf("Guests() after restart = %v, want %v", g, wantGuests)
	}
	if n := got.Nodes(); len(n) != len(wantNodes) || !equalAll(n, wantNodes) {
		t.Errorf("Nodes() after restart = %v, want %v", n, wantNodes)
	}

	// Credentials survive; the used token stays used.
	a.clients = s.clientsAs(a.cert, "")
	if _, err := a.cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{})); err != nil {
		t.Errorf("Status() as n1 after restart = %v", err)
	}
	anon := s.clients("")
	if _, err := anon.agent.Enroll(ctx, connect.NewRequest(&corpusv1.EnrollRequest{JoinToken: used, Name: "n3", CsrPem: testCSR(t)})); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("Enroll(used token) after restart = %v, want %v", err, connect.CodePermissionDenied)
	}
	if _, err := anon.agent.Enroll(ctx, connect.NewRequest(&corpusv1.EnrollRequest{JoinToken: unused, Name: "n3", CsrPem: testCSR(t)})); err != nil {
		t.Errorf("Enroll(unused token) after restart = %v", err)
	}
	// And the new leader still schedules.
	create(s, "db")
}

func equalAll[T proto.Message](a, b []T) bool {
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestServeEndsStreams(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	a := s.enroll("n1")
	w := a.watch(t)
	w.next("the first message", func(*corpusv1.WatchResponse) bool { return true })
	if err := s.stop(); err != nil {
		t.Fatalf("Serve() = %v", err)
	}
	// The agent must learn the coordinator is gone, so it can go and find
	// the new leader, rather than wait on a replica that has stopped.
	ended := make(chan error, 1)
	go func() {
		for w.stream.Receive() {
		}
		ended <- w.stream.Err()
	}()
	select {
	case err := <-ended:
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Watch() after Serve returned ended by the client's deadline, want the server to end it")
		}
		// Unavailable, which clients retry on another replica; not
		// Cancelled, which says the client gave up.
		if reason := rpc.RetryOf(err).GetReason(); connect.CodeOf(err) != connect.CodeUnavailable || reason != corpusv1.RetryStopping {
			t.Errorf("Watch() ended by a stopping replica: %v (retry %q), want unavailable with retry %q", err, reason, corpusv1.RetryStopping)
		}
	case <-time.After(testrun.D(waitTimeout)):
		t.Errorf("Watch() still open %v after Serve returned", waitTimeout)
	}
}

func TestNodeMarkedDown(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir(), func(c *coordinator.Config) { c.NodeTimeout = time.Second })
	a := s.enroll("n1")
	reported := time.Now()
	a.report(t)
	status := func(want string) func(v *state.Snap) bool {
		return func(v *state.Snap) bool { return v.Node(a.id).GetStatus() == want }
	}
	s.waitFor("n1 ready", status(state.NodeReady))
	s.waitFor("n1 down", status(state.NodeDown))
	if d := time.Since(reported); d < time.Second {
		t.Errorf("n1 marked down %v after its last report, want at least the 1s node timeout", d)
	}
	// Reporting again brings it back.
	a.report(t)
	s.waitFor("n1 ready again", status(state.NodeReady))
}

// testCSR is a certificate request for a fresh key.
func testCSR(t *testing.T) []byte {
	t.Helper()
	_, csr, err := pki.NewKeyAndCSR("test")
	if err != nil {
		t.Fatal(err)
	}
	return csr
}
