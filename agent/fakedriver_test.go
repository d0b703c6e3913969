package agent_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/agent"
	"corpus/coordinator"
	"corpus/drivers"
	"corpus/drivers/fakedriver"
	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// TestAgentWithFakeDriver runs the agent as the daemon builds it
// (agent.New and Run) against a real one-replica coordinator in this
// process, on a fake driver (drivers/fakedriver) that keeps its guests
// in memory: guests created, stopped, started and deleted through the
// coordinator's API become the driver's calls, and the agent's reports
// bring their states back; a driver error is the guest's failure
// reason; a restarted agent adopts the running guests without touching
// them. No root, no LXC.
func TestAgentWithFakeDriver(t *testing.T) {
	t.Parallel()
	const wait = 15 * time.Second
	ctx := context.Background()
	srv, guests, joinToken := startCoordinator(t)
	fake := fakedriver.New("fake", "busybox")
	stateDir := t.TempDir()
	stop := runAgent(t, srv.APIAddr(), joinToken, stateDir, fake)

	// observed waits until the coordinator says the guest is in state.
	observed := func(name, state string) *corpusv1.Guest {
		t.Helper()
		var g *corpusv1.Guest
		testrun.Wait(t, wait, "guest "+name+" "+state, func() error {
			res, err := guests.GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: name}))
			if err != nil {
				return err
			}
			g = res.Msg.Guest
			if o := g.GetObserved(); o.GetState() != state {
				return fmt.Errorf("guest %s is %q (%s)", name, o.GetState(), o.GetMessage())
			}
			return nil
		})
		return g
	}
	create := func(name string) {
		t.Helper()
		_, err := guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: name, Spec: &corpusv1.GuestSpec{
			Driver: "fake", Image: "busybox", Resources: &corpusv1.Resources{MemoryBytes: 64 << 20, CpuMillis: 100, DiskBytes: 1 << 30}}}))
		if err != nil {
			t.Fatalf("CreateGuest(%s) = %v", name, err)
		}
	}
	action := func(f func(context.Context, *connect.Request[corpusv1.GuestActionRequest]) (*connect.Response[corpusv1.GuestActionResponse], error), name string) {
		t.Helper()
		if _, err := f(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: name})); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	running := func(name string) int {
		t.Helper()
		st, ok := fake.Guest(name)
		if !ok || st.State != "running" {
			t.Fatalf("fake driver holds %s as %+v (present %v), want running", name, st, ok)
		}
		return st.PID
	}

	create("web")
	observed("web", corpusv1.ObservedRunning)
	running("web")
	action(guests.StopGuest, "web")
	observed("web", corpusv1.ObservedStopped)
	action(guests.StartGuest, "web")
	observed("web", corpusv1.ObservedRunning)
	if got, want := opsOf(fake.Calls(), "web"), "create start stop start"; got != want {
		t.Errorf("driver calls for web = %q, want %q", got, want)
	}

	// A driver that fails says why through the guest's observed state;
	// once it works again, the agent's retry creates the guest.
	fake.Fail("create", errors.New("the fake disk is full"))
	create("db")
	g := observed("db", corpusv1.ObservedFailed)
	if msg := g.GetObserved().GetMessage(); !strings.Contains(msg, "the fake disk is full") {
		t.Errorf("failed guest db says %q, want the driver's error", msg)
	}
	fake.Fail("create", nil)
	observed("db", corpusv1.ObservedRunning)

	// A new agent on the same state adopts what runs: nothing is
	// created, started, stopped or destroyed again.
	pids := map[string]int{"web": running("web"), "db": running("db")}
	stop()
	before := len(fake.Calls())
	stop = runAgent(t, srv.APIAddr(), joinToken, stateDir, fake)
	action(guests.StopGuest, "db") // proves the new agent watches and reports
	observed("db", corpusv1.ObservedStopped)
	if got, want := opsOf(fake.Calls()[before:], ""), "stop db"; got != want {
		t.Errorf("driver calls after the agent restarted = %q, want %q", got, want)
	}
	if pid := running("web"); pid != pids["web"] {
		t.Errorf("web's PID after the agent restarted = %d, want %d (not restarted)", pid, pids["web"])
	}

	action(guests.DeleteGuest, "web")
	testrun.Wait(t, wait, "guest web gone", func() error {
		_, err := guests.GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: "web"}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			return fmt.Errorf("GetGuest(web) = %v, want not found", err)
		}
		return nil
	})
	if _, ok := fake.Guest("web"); ok {
		t.Errorf("fake driver still holds web after its delete")
	}
	if got := opsOf(fake.Calls(), "web"); !strings.HasSuffix(got, "destroy") {
		t.Errorf("driver calls for web = %q, want a destroy last", got)
	}
	stop()
}

// opsOf lists calls' ops for guest, or "op guest" pairs of all when
// guest is empty.
func opsOf(calls []fakedriver.Call, guest string) string {
	var out []string
	for _, c := range calls {
		switch {
		case guest == "":
			out = append(out, c.Op+" "+c.Guest)
		case c.Guest == guest:
			out = append(out, c.Op)
		}
	}
	return strings.Join(out, " ")
}

// startCoordinator runs a one-replica coordinator in this process until
// the test ends and returns it, a guest client as the operator and a
// join token.
func startCoordinator(t *testing.T) (*coordinator.Server, corpusv1connect.GuestServiceClient, string) {
	t.Helper()
	cfg := coordinator.Default()
	cfg.DataDir = t.TempDir()
	cfg.APIAddr, cfg.RaftAddr, cfg.DNS.Addr, cfg.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Logger = testLogger(t, "coordinator")
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
			t.Errorf("coordinator Serve() = %v, want nil after a clean stop", err)
		}
	})
	ca, err := pki.ParseCert(srv.CACert())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	hc := rpc.HTTPClient(pki.ClientConfig(pool, nil, pki.RoleCoordinator, ""))
	url := "https://" + srv.APIAddr()
	opt := connect.WithInterceptors(rpc.Bearer(srv.OpsToken()), rpc.RetryWithoutLeader(testrun.D(10*time.Second)))
	nodes := corpusv1connect.NewNodeServiceClient(hc, url, opt)
	var token string
	testrun.Wait(t, 15*time.Second, "the coordinator leads and takes join tokens", func() error {
		res, err := nodes.CreateJoinToken(context.Background(), connect.NewRequest(&corpusv1.CreateJoinTokenRequest{}))
		if err != nil {
			return err
		}
		token = res.Msg.Token
		return nil
	})
	return srv, corpusv1connect.NewGuestServiceClient(hc, url, opt), token
}

// runAgent builds an agent on stateDir and fake, changed by opts, and
// runs it; the function returned stops it and waits until Run returned
// (also done when the test ends).
func runAgent(t *testing.T, coord, joinToken, stateDir string, fake *fakedriver.Driver, opts ...func(*agent.Config)) func() {
	t.Helper()
	cfg := agent.Default()
	cfg.StateDir, cfg.Coordinators, cfg.JoinToken, cfg.Name = stateDir, []string{coord}, joinToken, "node-1"
	cfg.APIAddr, cfg.Drivers = "127.0.0.1:0", []string{"fake"}
	cfg.Network, cfg.GitAddr, cfg.GossipAddr = false, "", ""
	cfg.ReportInterval, cfg.ResyncInterval = 200*time.Millisecond, time.Second
	cfg.Logger = testLogger(t, "agent")
	for _, o := range opts {
		o(&cfg)
	}
	a, err := agent.New(cfg, agent.Parts{Drivers: map[string]drivers.Driver{"fake": fake}})
	if err != nil {
		t.Fatalf("agent.New() = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent Run() = %v, want nil after a clean stop", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// testLogger logs to t, named for component, until the test ends.
func testLogger(t *testing.T, component string) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test_component", component)
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
