package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/crypto/ssh"

	"corpus/agent/shell"
	"corpus/internal/atomicfile"
	"corpus/internal/names"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// The git endpoint: an SSH server that serves only git-receive-pack and
// git-upload-pack on one bare repository per project environment, with
// keys checked against the users the coordinator knows. A push deploys
// from the repository's pre-receive hook, which hands the new commit back
// to this process (see hook.go) so the ref moves only when the deploy
// succeeded.

const (
	sshHandshakeTimeout = 10 * time.Second
	maxSSHConns         = 64
	// hookEnvSocket and hookEnvSession tell the hook how to reach the
	// agent; hookEnvBin is the binary that runs it.
	hookEnvSocket  = "CORPUS_HOOK_SOCKET"
	hookEnvSession = "CORPUS_HOOK_SESSION"
	hookEnvBin     = "CORPUS_HOOK_BIN"
)

// gitServer is the agent's SSH git endpoint.
type gitServer struct {
	a        *Agent
	config   *ssh.ServerConfig
	listener net.Listener
	root     string // bare repositories
	hooks    *hookServer
	slots    chan struct{}

	mu       sync.Mutex
	sessions map[string]*pushSession // by hook session token
}

// pushSession is one authorised git-receive-pack run.
type pushSession struct {
	user    string
	project string
	access  *corpusv1.GitAccessResponse
}

func newGitServer(a *Agent) (*gitServer, error) {
	root := filepath.Join(a.cfg.StateDir, "git")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	key, err := hostKey(filepath.Join(a.cfg.StateDir, "ssh_host_ed25519_key"))
	if err != nil {
		return nil, err
	}
	s := &gitServer{a: a, root: root, sessions: map[string]*pushSession{}, slots: make(chan struct{}, maxSSHConns)}
	s.config = &ssh.ServerConfig{
		PublicKeyCallback: s.checkKey,
		ServerVersion:     "SSH-2.0-corpus",
		MaxAuthTries:      6,
	}
	s.config.AddHostKey(key)
	ln, err := net.Listen("tcp", a.cfg.GitAddr)
	if err != nil {
		return nil, fmt.Errorf("listening for git on %s: %w", a.cfg.GitAddr, err)
	}
	s.listener = ln
	hooks, err := newHookServer(filepath.Join(root, "hook.sock"), s)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s.hooks = hooks
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

// port is the git endpoint's TCP port.
func (s *gitServer) port() int32 { return int32(s.listener.Addr().(*net.TCPAddr).Port) }

// checkKey admits keys that belong to a user of the cluster.
func (s *gitServer) checkKey(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	fp := ssh.FingerprintSHA256(key)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.a.gitAccess(ctx, &corpusv1.GitAccessRequest{Fingerprint: fp})
	if err != nil {
		s.a.logger.Warn("git: checking a key", "error", err)
		return nil, errors.New("cannot reach the coordinator to check the key")
	}
	if !res.Allowed {
		s.a.logger.Info("git: key refused", "fingerprint", fp, "remote", meta.RemoteAddr().String(), "reason", res.Reason)
		return nil, errors.New(res.Reason)
	}
	return &ssh.Permissions{Extensions: map[string]string{"user": res.User, "fingerprint": fp}}, nil
}

// gitAccess asks the coordinator, failing over like every other call.
func (a *Agent) gitAccess(ctx context.Context, req *corpusv1.GitAccessRequest) (*corpusv1.GitAccessResponse, error) {
	return coordCall(a, func(c corpusv1connect.AgentServiceClient) (*connect.Response[corpusv1.GitAccessResponse], error) {
		return c.GitAccess(ctx, connect.NewRequest(req))
	})
}

// serve accepts SSH connections until ctx ends.
func (s *gitServer) serve(ctx context.Context) {
	go func() {
		<-ctx.Done()
		s.listener.Close()
		s.hooks.close()
	}()
	go s.hooks.serve()
	for {
		conn, err := s.listener.Accept()
		if err != nil {
			if ctx.Err() == nil {
				s.a.logger.Error("git endpoint stopped", "error", err)
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

func (s *gitServer) handle(ctx context.Context, conn net.Conn) {
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

// session serves one SSH session: a single exec of a git command, or a
// shell (sshshell.go).
func (s *gitServer) session(ctx context.Context, sc *ssh.ServerConn, ch ssh.Channel, reqs <-chan *ssh.Request) {
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
		code := s.exec(ctx, sc, ch, payload.Command)
		x.exit(code)
		return
	}
}

// parseGitCommand reads "git-receive-pack 'hello'" (or git-upload-pack,
// "git receive-pack", "/hello.git", "hello/dev") into its parts.
func parseGitCommand(cmd string) (service, project, env string, err error) {
	verb, arg, ok := strings.Cut(strings.TrimSpace(cmd), " ")
	if verb == "git" {
		verb2, rest, _ := strings.Cut(arg, " ")
		verb, arg = "git-"+verb2, rest
	}
	if !ok || (verb != "git-receive-pack" && verb != "git-upload-pack") {
		return "", "", "", errors.New("this endpoint serves git-receive-pack, git-upload-pack and shell PROJECT[/ENV] only")
	}
	arg = strings.TrimSpace(arg)
	if len(arg) >= 2 && (arg[0] == '\'' || arg[0] == '"') && arg[len(arg)-1] == arg[0] {
		arg = arg[1 : len(arg)-1]
	}
	arg = strings.TrimSuffix(strings.Trim(arg, "/"), ".git")
	project, env, _ = strings.Cut(arg, "/")
	if err := names.Validate("project", project); err != nil {
		return "", "", "", fmt.Errorf("repository %q: %w", arg, err)
	}
	if env != "" {
		switch env {
		case corpusv1.EnvDev, corpusv1.EnvStaging, corpusv1.EnvProd:
		default:
			return "", "", "", fmt.Errorf("repository %q: environment %q is not dev, staging or prod", arg, env)
		}
	}
	return verb, project, env, nil
}

func (s *gitServer) exec(ctx context.Context, sc *ssh.ServerConn, ch ssh.Channel, command string) int {
	stderr := ch.Stderr()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "corpus: "+format+"\n", args...)
		return 1
	}
	service, project, env, err := parseGitCommand(command)
	if err != nil {
		return fail("%v", err)
	}
	user, fp := sc.Permissions.Extensions["user"], sc.Permissions.Extensions["fingerprint"]
	write := service == "git-receive-pack"
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	access, err := s.a.gitAccess(actx, &corpusv1.GitAccessRequest{Fingerprint: fp, Project: project, Env: env, Write: write})
	cancel()
	if err != nil {
		return fail("cannot reach the coordinator: %v", err)
	}
	if !access.Allowed {
		s.a.logger.Info("git: access refused", "user", user, "project", project, "service", service, "reason", access.Reason)
		return fail("%s", access.Reason)
	}
	repo, err := s.ensureRepo(project, access.Env)
	if err != nil {
		return fail("preparing the repository: %v", err)
	}
	cmd := exec.CommandContext(ctx, service, repo)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1")
	if write {
		token := secret.Hex(16)
		s.mu.Lock()
		s.sessions[token] = &pushSession{user: user, project: project, access: access}
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.sessions, token)
			s.mu.Unlock()
		}()
		bin, err := os.Executable()
		if err != nil {
			return fail("locating the corpus binary: %v", err)
		}
		cmd.Env = append(cmd.Env, hookEnvSocket+"="+s.hooks.path, hookEnvSession+"="+token, hookEnvBin+"="+bin)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, stderr
	s.a.logger.Info("git: serving", "user", user, "project", project, "env", access.Env.GetName(), "service", service)
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		return fail("running %s: %v", service, err)
	}
	return 0
}

// preReceiveHook hands the push to the agent (see RunHook).
const preReceiveHook = "#!/bin/sh\n# Written by the corpus agent: deploys before the push is accepted.\nexec \"$" + hookEnvBin + "\" git-hook pre-receive\n"

// ensureRepo returns the bare repository of a project environment,
// creating it and (re)writing its settings and hook.
func (s *gitServer) ensureRepo(project string, env *corpusv1.ProjectEnv) (string, error) {
	repo := filepath.Join(s.root, project+"-"+env.GetName()+".git")
	if _, err := os.Stat(filepath.Join(repo, "HEAD")); errors.Is(err, os.ErrNotExist) {
		tmp := repo + ".new"
		os.RemoveAll(tmp)
		if out, err := exec.Command("git", "init", "--bare", "--quiet", "--initial-branch="+env.GetBranch(), tmp).CombinedOutput(); err != nil {
			return "", fmt.Errorf("git init: %v: %s", err, out)
		}
		if err := os.Rename(tmp, repo); err != nil {
			return "", err
		}
	}
	settings := [][2]string{
		{"receive.denyDeletes", "true"},
		{"receive.denyNonFastForwards", "false"},
		{"receive.maxInputSize", fmt.Sprint(s.a.cfg.GitMaxPushBytes)},
		{"receive.fsckObjects", "true"},
		{"core.hooksPath", "hooks"},
	}
	for _, kv := range settings {
		if out, err := exec.Command("git", "--git-dir", repo, "config", kv[0], kv[1]).CombinedOutput(); err != nil {
			return "", fmt.Errorf("git config %s: %v: %s", kv[0], err, out)
		}
	}
	if err := atomicfile.Write(filepath.Join(repo, "hooks", "pre-receive"), []byte(preReceiveHook), 0o755); err != nil {
		return "", err
	}
	return repo, nil
}

// session looks up a push by its hook token.
func (s *gitServer) lookup(token string) *pushSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[token]
}

// frame writes one length-prefixed frame of the hook protocol.
func frame(w io.Writer, kind byte, data []byte) error {
	hdr := make([]byte, 5)
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(data)))
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

// readFrame reads one frame; max bounds its size.
func readFrame(r io.Reader, max int) (byte, []byte, error) {
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if int64(n) > int64(max) {
		return 0, nil, fmt.Errorf("frame of %d bytes is over %d", n, max)
	}
	data := make([]byte, n)
	_, err := io.ReadFull(r, data)
	return hdr[0], data, err
}
