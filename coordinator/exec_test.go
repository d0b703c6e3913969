package coordinator_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"corpus/coordinator"
	"corpus/coordinator/state"
	"corpus/internal/pki"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// fakeAgent serves the node agent API without drivers: the real agent
// needs LXC to exec anything. It checks the coordinator's credential as
// the agent does, echoes argv and stdin, and fails on request.
// fakeAgent answers only Exec and Shell; the rest of the agent API is
// the generated "unimplemented" handler.
type fakeAgent struct {
	corpusv1connect.UnimplementedNodeAgentServiceHandler
	key string
	// shellEnded, if set, is told when a Shell call ends.
	shellEnded chan struct{}
	// loads counts the Load calls (see visibility_test.go).
	loads atomic.Uint64
}

// checkKey refuses a call without the cluster's agent key, as the
// agent does.
func (f *fakeAgent) checkKey(h http.Header) error {
	if h.Get("Authorization") != "Bearer "+f.key {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("not the cluster's agent key"))
	}
	return nil
}

func (f *fakeAgent) Exec(_ context.Context, req *connect.Request[corpusv1.ExecGuestRequest], stream *connect.ServerStream[corpusv1.ExecOutput]) error {
	if err := f.checkKey(req.Header()); err != nil {
		return err
	}
	m := req.Msg
	if m.Argv[0] == "fail" {
		return connect.NewError(connect.CodeNotFound, errors.New("guest is not on this node"))
	}
	for _, out := range []*corpusv1.ExecOutput{
		{Stdout: []byte(m.Name + ": " + strings.Join(m.Argv, " ") + "\n")},
		{Stderr: m.Stdin},
		{Exited: true, ExitCode: 3},
	} {
		if err := stream.Send(out); err != nil {
			return err
		}
	}
	return nil
}

// Shell echoes the session's input until the coordinator ends the call.
func (f *fakeAgent) Shell(ctx context.Context, stream *connect.BidiStream[corpusv1.ShellInput, corpusv1.ExecOutput]) error {
	if f.shellEnded != nil {
		defer func() { f.shellEnded <- struct{}{} }()
	}
	if err := f.checkKey(stream.RequestHeader()); err != nil {
		return err
	}
	for {
		in, err := stream.Receive()
		if err != nil {
			return err
		}
		if len(in.Stdin) > 0 {
			if err := stream.Send(&corpusv1.ExecOutput{Stdout: in.Stdin}); err != nil {
				return err
			}
		}
	}
}

// serveFakeAgent starts a fakeAgent on a dynamic port and returns its
// address.
func serveFakeAgent(t *testing.T, s *server, a *agent) string {
	t.Helper()
	return serveAgent(t, s, a, &fakeAgent{key: a.agentKey})
}

// serveAgent serves fa as a's agent on a dynamic port and returns its
// address.
func serveAgent(t *testing.T, s *server, a *agent, fa *fakeAgent) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(corpusv1connect.NewNodeAgentServiceHandler(fa))
	// It holds the node's certificate, as the real agent does, and lets
	// only coordinators in.
	srv := rpc.NewServer(mux, pki.ServerConfig(s.caPool(), pki.NewKeys(a.cert), true))
	go rpc.Serve(srv, ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func TestExecGuest(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	ctx := context.Background()
	a := s.enroll("n1")
	a.address = serveFakeAgent(t, s, a)
	a.report(t)
	res, err := s.ops().guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "web", Spec: &corpusv1.GuestSpec{Image: "busybox"}}))
	if err != nil {
		t.Fatalf("CreateGuest(web) = %v", err)
	}
	id := res.Msg.Guest.Id
	waitGuest(t, s, "web", "web placed", func(r *corpusv1.GetGuestResponse) bool { return r.NodeName == "n1" })

	exec := func(req *corpusv1.ExecGuestRequest) ([]*corpusv1.ExecOutput, error) {
		stream, err := s.ops().guests.ExecGuest(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		defer stream.Close()
		var out []*corpusv1.ExecOutput
		for stream.Receive() {
			out = append(out, stream.Msg())
		}
		return out, stream.Err()
	}
	refused := []struct {
		name string
		req  *corpusv1.ExecGuestRequest
		want connect.Code
	}{
		{"bad name", &corpusv1.ExecGuestRequest{Name: "Web", Argv: []string{"true"}}, connect.CodeInvalidArgument},
		{"no argv", &corpusv1.ExecGuestRequest{Name: "web"}, connect.CodeInvalidArgument},
		{"stdin too large", &corpusv1.ExecGuestRequest{Name: "web", Argv: []string{"cat"}, Stdin: make([]byte, 1<<20+1)}, connect.CodeInvalidArgument},
		{"unknown guest", &corpusv1.ExecGuestRequest{Name: "db", Argv: []string{"true"}}, connect.CodeNotFound},
		{"not running yet", &corpusv1.ExecGuestRequest{Name: "web", Argv: []string{"true"}}, connect.CodeFailedPrecondition},
	}
	for _, tt := range refused {
		if _, err := exec(tt.req); codeOf(err) != tt.want {
			t.Errorf("ExecGuest(%s) = %v, want %v", tt.name, err, tt.want)
		}
	}

	a.report(t, observed(id, state.ObservedRunning))
	waitGuest(t, s, "web", "web running", func(r *corpusv1.GetGuestResponse) bool { return r.Status == state.ObservedRunning })
	out, err := exec(&corpusv1.ExecGuestRequest{Name: "web", Argv: []string{"echo", "hi"}, Stdin: []byte("input")})
	if err != nil {
		t.Fatalf("ExecGuest(echo hi) = %v", err)
	}
	if len(out) != 3 || string(out[0].Stdout) != "web: echo hi\n" || string(out[1].Stderr) != "input" || !out[2].Exited || out[2].ExitCode != 3 {
		t.Errorf("ExecGuest(echo hi) = %v, want the agent's output relayed, ending with exit code 3", out)
	}
	// Every exec is in the audit log, the program named, its arguments
	// (which may hold secrets) counted only.
	if e := lastAudit(t, s, "exec_guest"); e.Actor != "ops" || e.Target != "web" || e.Result != "started echo with 1 arguments" {
		t.Errorf("audit of the exec = %v, want ops starting echo in web", e)
	}
	// The agent's error code comes through.
	if _, err := exec(&corpusv1.ExecGuestRequest{Name: "web", Argv: []string{"fail"}}); codeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "agent of node n1") {
		t.Errorf("ExecGuest(fail) = %v, want %v from the agent of node n1", err, connect.CodeNotFound)
	}
	// An agent that cannot be reached is Unavailable.
	a.address = "127.0.0.1:1"
	a.report(t)
	if _, err := exec(&corpusv1.ExecGuestRequest{Name: "web", Argv: []string{"true"}}); codeOf(err) != connect.CodeUnavailable {
		t.Errorf("ExecGuest(unreachable agent) = %v, want %v", err, connect.CodeUnavailable)
	}

	// A removed node's agent client is dropped when the next one is made.
	if got := coordinator.AgentClientNodes(s.Server); !slices.Equal(got, []string{a.id}) {
		t.Fatalf("agent clients = %v, want [%s]", got, a.id)
	}
	if _, err := s.ops().guests.DeleteGuest(ctx, connect.NewRequest(&corpusv1.GuestActionRequest{Name: "web"})); err != nil {
		t.Fatal(err)
	}
	a.report(t, observed(id, state.ObservedDeleted))
	s.waitFor("web gone", func(v *state.Snap) bool { return v.GuestByName("web") == nil })
	if _, err := s.ops().nodes.RemoveNode(ctx, connect.NewRequest(&corpusv1.RemoveNodeRequest{Name: "n1"})); err != nil {
		t.Fatal(err)
	}
	b := s.enroll("n2")
	b.address = serveFakeAgent(t, s, b)
	b.report(t)
	res, err = s.ops().guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "api", Spec: &corpusv1.GuestSpec{Image: "busybox"}}))
	if err != nil {
		t.Fatal(err)
	}
	waitGuest(t, s, "api", "api placed", func(r *corpusv1.GetGuestResponse) bool { return r.NodeName == "n2" })
	b.report(t, observed(res.Msg.Guest.Id, state.ObservedRunning))
	waitGuest(t, s, "api", "api running", func(r *corpusv1.GetGuestResponse) bool { return r.Status == state.ObservedRunning })
	if _, err := exec(&corpusv1.ExecGuestRequest{Name: "api", Argv: []string{"true"}}); err != nil {
		t.Fatalf("ExecGuest(api) = %v", err)
	}
	if got := coordinator.AgentClientNodes(s.Server); !slices.Equal(got, []string{b.id}) {
		t.Errorf("agent clients after n1's removal = %v, want only n2's [%s]", got, b.id)
	}
}
