package sshd

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"log/slog"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"golang.org/x/crypto/ssh"

	"corpus/agent/shell"
	"corpus/drivers"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// fakeHost answers the endpoint's key checks as a coordinator would for
// a key of user alice, and records what it was asked.
type fakeHost struct {
	corpusv1connect.AgentServiceClient // only GitAccess is called

	mu      sync.Mutex
	checked []*corpusv1.GitAccessRequest
	from    string
}

func (h *fakeHost) CallCoordinator(f func(corpusv1connect.AgentServiceClient) error) error {
	return f(h)
}

func (h *fakeHost) GitAccess(_ context.Context, req *connect.Request[corpusv1.GitAccessRequest]) (*connect.Response[corpusv1.GitAccessResponse], error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checked = append(h.checked, req.Msg)
	return connect.NewResponse(&corpusv1.GitAccessResponse{Allowed: true, User: "alice", Role: "dev"}), nil
}

func (h *fakeHost) ServeGit(_ context.Context, user, fp, from, command string, _ io.ReadWriter, _ io.Writer) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.from = from
	return 0
}

func (h *fakeHost) ShellRequest(context.Context, string, string, []string, map[string]string, string, bool, string, *corpusv1.TerminalSize) (shell.Request, drivers.Driver, error) {
	panic("no shells here")
}

// TestGitCommandSaysFrom: a git command reaches the agent with the SSH
// client's address (the coordinator records it as the key's last use);
// the handshake's check of the key carries none, as a key only offered
// is not a use.
func TestGitCommandSaysFrom(t *testing.T) {
	t.Parallel()
	host := &fakeHost{}
	s, err := New(Config{StateDir: t.TempDir(), Addr: "127.0.0.1:0", Host: host, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx)

	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ssh.Dial("tcp", s.listener.Addr().String(), &ssh.ClientConfig{User: "git", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Run("git-upload-pack 'hello.git'"); err != nil {
		t.Fatalf("git-upload-pack: %v", err)
	}
	host.mu.Lock()
	defer host.mu.Unlock()
	if want := c.LocalAddr().String(); host.from != want {
		t.Errorf("ServeGit from %q, want the client's address %s", host.from, want)
	}
	if len(host.checked) == 0 {
		t.Fatal("the key was never checked")
	}
	for _, req := range host.checked {
		if req.From != "" || req.Fingerprint != ssh.FingerprintSHA256(signer.PublicKey()) {
			t.Errorf("the handshake's check = %v, want the key's fingerprint and no address", req)
		}
	}
}
