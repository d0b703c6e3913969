package coordinator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"corpus/coordinator/state"
	"corpus/internal/testrun"
	corpusv1 "corpus/proto/corpus/v1"
)

// TestShellEndsOnRevoke: an open shell session ends with a "token
// revoked" error as soon as its token is revoked, its session on the
// agent with it; a session of another token of the same user goes on.
// The agent is fakeAgent (the real one needs LXC; test/e2e's
// TestTokenRevokeEndsShell runs it): its Shell echoes input until the
// coordinator ends the call.
func TestShellEndsOnRevoke(t *testing.T) {
	t.Parallel()
	s := start(t, t.TempDir())
	ctx := context.Background()
	a := s.enroll("n1")
	fa := &fakeAgent{key: a.agentKey, shellEnded: make(chan struct{}, 2)}
	a.address = serveAgent(t, s, a, fa)
	a.report(t)
	res, err := s.ops().guests.CreateGuest(ctx, connect.NewRequest(&corpusv1.CreateGuestRequest{Name: "web", Spec: &corpusv1.GuestSpec{Image: "busybox"}}))
	if err != nil {
		t.Fatal(err)
	}
	waitGuest(t, s, "web", "web placed", func(r *corpusv1.GetGuestResponse) bool { return r.NodeName == "n1" })
	a.report(t, observed(res.Msg.Guest.Id, state.ObservedRunning))
	waitGuest(t, s, "web", "web running", func(r *corpusv1.GetGuestResponse) bool { return r.Status == state.ObservedRunning })

	ops := s.ops()
	if _, err := ops.users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: "alice", Role: "ops"})); err != nil {
		t.Fatal(err)
	}
	var toks [2]*corpusv1.CreateTokenResponse
	for i := range toks {
		r, err := ops.users.CreateToken(ctx, connect.NewRequest(&corpusv1.CreateTokenRequest{User: "alice"}))
		if err != nil {
			t.Fatal(err)
		}
		toks[i] = r.Msg
	}
	type session struct {
		send func(string) error
		recv chan string
		done chan error
	}
	open := func(tok string) *session {
		sctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		st := s.clients(tok).guests.Shell(sctx)
		ss := &session{recv: make(chan string, 16), done: make(chan error, 1)}
		ss.send = func(in string) error { return st.Send(&corpusv1.ShellInput{Stdin: []byte(in)}) }
		if err := st.Send(&corpusv1.ShellInput{Open: &corpusv1.ExecGuestRequest{Name: "web", Argv: []string{"sh"}}, Tty: true}); err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				out, err := st.Receive()
				if err != nil {
					ss.done <- err
					return
				}
				ss.recv <- string(out.Stdout)
			}
		}()
		return ss
	}
	echoes := func(ss *session, what string) {
		t.Helper()
		if err := ss.send(what); err != nil {
			t.Fatalf("sending %q: %v", what, err)
		}
		select {
		case got := <-ss.recv:
			if got != what {
				t.Fatalf("the session echoed %q, want %q", got, what)
			}
		case err := <-ss.done:
			t.Fatalf("the session ended: %v", err)
		case <-time.After(testrun.D(15 * time.Second)):
			t.Fatalf("no echo of %q", what)
		}
	}
	revoked, kept := open(toks[0].Token), open(toks[1].Token)
	echoes(revoked, "one")
	echoes(kept, "two")

	if _, err := ops.users.RevokeToken(ctx, connect.NewRequest(&corpusv1.RevokeTokenRequest{Id: toks[0].Info.Id})); err != nil {
		t.Fatal(err)
	}
	acked := time.Now()
	select {
	case err := <-revoked.done:
		if codeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "token revoked") {
			t.Errorf("the revoked token's session ended with %v, want Unauthenticated: token revoked", err)
		}
		if took := time.Since(acked); took > testrun.D(time.Second) {
			t.Errorf("the session ended %s after the revoke, want within %s", took, testrun.D(time.Second))
		}
	case <-time.After(testrun.D(15 * time.Second)):
		t.Fatal("the revoked token's session is still open")
	}
	select {
	case <-fa.shellEnded:
	case <-time.After(testrun.D(15 * time.Second)):
		t.Fatal("the agent's session of the revoked token is still open")
	}
	echoes(kept, "three")
}
