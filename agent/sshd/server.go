package sshd

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/crypto/ssh"

	"corpus/agent/shell"
	"corpus/drivers"
	"corpus/internal/atomicfile"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// The node's SSH endpoint, the one git pushes go to: keys are checked
// against the users the coordinator knows, and a session runs one
// command, a git one (agent/deploy serves it: a push deploys) or a shell
// in a project's guest (shell.go). Forwarding and subsystems are
// refused.

const (
	sshHandshakeTimeout = 10 * time.Second
	maxSSHConns         = 64
)

// Host is what the endpoint needs of the agent.
type Host interface {
	// CallCoordinator calls a coordinator, failing over like every
	// other call of the agent.
	CallCoordinator(f func(corpusv1connect.AgentServiceClient) error) error
	// ServeGit serves a git command of user, whose key has fingerprint
	// fp (agent/deploy: a push deploys), and returns its exit status.
	ServeGit(ctx context.Context, user, fp, from, command string, rw io.ReadWriter, stderr io.Writer) int
	// ShellRequest prepares a session in guest name of this node (see
	// agent/shell).
	ShellRequest(ctx context.Context, name, project string, argv []string, env map[string]string, dir string,
		tty bool, term string, size *corpusv1.TerminalSize) (shell.Request, drivers.Driver, error)
}

// Config configures the endpoint.
type Config struct {
	// StateDir holds the node's host key.
	StateDir string
	// Addr is the listen address.
	Addr   string
	Host   Host
	Shells *shell.Manager
	Logger *slog.Logger
}

// Server is the agent's SSH endpoint.
type Server struct {
	cfg      Config
	logger   *slog.Logger
	config   *ssh.ServerConfig
	listener net.Listener
	slots    chan struct{}
}

// New loads (or makes) the node's host key and binds the endpoint's
// listener; Serve serves it.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	key, err := hostKey(filepath.Join(cfg.StateDir, "ssh_host_ed25519_key"))
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, logger: cfg.Logger, slots: make(chan struct{}, maxSSHConns)}
	s.config = &ssh.ServerConfig{
		PublicKeyCallback: s.checkKey,
		ServerVersion:     "SSH-2.0-corpus",
		MaxAuthTries:      6,
	}
	s.config.AddHostKey(key)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listening for git on %s: %w", cfg.Addr, err)
	}
	s.listener = ln
	return s, nil
}

// hostKey loads the node's SSH host key, creating it the first time.
func hostKey(file string) (ssh.Signer, error) {
	if raw, err := os.ReadFile(file); err == nil {
		return ssh.ParsePrivateKey(raw)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "corpus git host key")
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(file, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	return ssh.NewSignerFromKey(priv)
}

// Port is the git endpoint's TCP port.
func (s *Server) Port() int32 { return int32(s.listener.Addr().(*net.TCPAddr).Port) }

// checkKey admits keys that belong to a user of the cluster.
func (s *Server) checkKey(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	fp := ssh.FingerprintSHA256(key)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.gitAccess(ctx, &corpusv1.GitAccessRequest{Fingerprint: fp})
	if err != nil {
		s.logger.Warn("git: checking a key", "error", err)
		return nil, errors.New("cannot reach the coordinator to check the key")
	}
	if !res.Allowed {
		s.logger.Info("git: key refused", "fingerprint", fp, "remote", meta.RemoteAddr().String(), "reason", res.Reason)
		return nil, errors.New(res.Reason)
	}
	return &ssh.Permissions{Extensions: map[string]string{"user": res.User, "fingerprint": fp}}, nil
}

// gitAccess asks the coordinator, failing over like every other call.
func (s *Server) gitAccess(ctx context.Context, req *corpusv1.GitAccessRequest) (*corpusv1.GitAccessResponse, error) {
	var res *corpusv1.GitAccessResponse
	err := s.cfg.Host.CallCoordinator(func(c corpusv1connect.AgentServiceClient) error {
		r, err := c.GitAccess(ctx, connect.NewRequest(req))
		if err == nil {
			res = r.Msg
		}
		return err
	})
	return res, err
}

// Serve accepts SSH connections until ctx ends.
func (s *Server) Serve(ctx context.Context) {
	go func() {
		<-ctx.Done()
		s.listener.Close()
	}()
	for {
		conn, err := s.listener.Accept()
		if err != nil {
			if ctx.Err() == nil {
				s.logger.Error("git endpoint stopped", "error", err)
			}
			return
		}
		select {
		case s.slots <- struct{}{}:
		default:
			conn.Close() // at the connection limit: shed load
			continue
		}
		go func() {
			defer func() { <-s.slots }()
			s.handle(ctx, conn)
		}()
	}
}

func (s *Server) handle(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(sshHandshakeTimeout))
	sc, chans, reqs, err := ssh.NewServerConn(conn, s.config)
	if err != nil {
		return
	}
	conn.SetDeadline(time.Time{})
	defer sc.Close()
	// Sessions end with the connection: a client that goes leaves
	// nothing running.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		sc.Wait()
		cancel()
	}()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "corpus serves git and shells only: no forwarding")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go s.session(ctx, sc, ch, creqs)
	}
}

// session serves one SSH session: a single exec of a git command (the
// deploy pipeline's), or a shell (shell.go).
func (s *Server) session(ctx context.Context, sc *ssh.ServerConn, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	x := &sshSession{s: s, sc: sc, ch: ch, resize: make(chan shell.Input, 8)}
	for req := range reqs {
		if req.Type != "exec" {
			if x.request(req) {
				return
			}
			continue
		}
		var payload struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
			req.Reply(false, nil)
			return
		}
		req.Reply(true, nil)
		if project, env, argv, ok := shellCommand(payload.Command); ok {
			// The shell runs while window changes keep coming.
			done := make(chan int, 1)
			go func() { done <- x.run(ctx, project, env, argv) }()
			for {
				select {
				case code := <-done:
					x.exit(code)
					return
				case req, ok := <-reqs:
					if !ok {
						x.exit(<-done)
						return
					}
					x.request(req)
				}
			}
		}
		user, fp := sc.Permissions.Extensions["user"], sc.Permissions.Extensions["fingerprint"]
		code := s.cfg.Host.ServeGit(ctx, user, fp, sc.RemoteAddr().String(), payload.Command, ch, ch.Stderr())
		x.exit(code)
		return
	}
}
