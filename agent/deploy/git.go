package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"corpus/agent/deploy/githook"
	"corpus/internal/keylock"
	"corpus/internal/names"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// The git side of the node's SSH endpoint (the agent's): git-receive-pack
// and git-upload-pack on one bare repository per project environment,
// for keys the coordinator admits. A push deploys from the repository's
// pre-receive hook, which hands the new commit back to this process (see
// hook.go) so the ref moves only when the deploy succeeded.

// hookEnvBin is the binary that runs the hook.
const hookEnvBin = "CORPUS_HOOK_BIN"

// gitServer is the pipeline's git repositories and the pushes to them
// under way.
type gitServer struct {
	p     *Pipeline
	root  string // bare repositories
	hooks *githook.Server
	// repos serializes the set-up of a repository (git config takes a
	// lock of its own and fails rather than wait): a push and the
	// instances of its environment on this node may all ask at once.
	repos keylock.Map

	mu       sync.Mutex
	sessions map[string]*pushSession // by hook session token
}

// pushSession is one authorised git-receive-pack run.
type pushSession struct {
	user    string
	project string
	access  *corpusv1.GitAccessResponse
}

// gitAccess asks the coordinator, failing over like every other call.
func (p *Pipeline) gitAccess(ctx context.Context, req *corpusv1.GitAccessRequest) (*corpusv1.GitAccessResponse, error) {
	return coordCall(p, func(c corpusv1connect.AgentServiceClient) (*connect.Response[corpusv1.GitAccessResponse], error) {
		return c.GitAccess(ctx, connect.NewRequest(req))
	})
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

// ServeGit serves a git command of the SSH endpoint's session for the
// key's owner (user, key fingerprint fp, the client's address from):
// git-receive-pack (a push, which
// deploys) or git-upload-pack, on the environment's repository, with
// rw as the command's input and output. It returns the exit status for
// the client; what went wrong is told on stderr.
func (p *Pipeline) ServeGit(ctx context.Context, user, fp, from, command string, rw io.ReadWriter, stderr io.Writer) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "corpus: "+format+"\n", args...)
		return 1
	}
	service, project, env, err := parseGitCommand(command)
	if err != nil {
		return fail("%v", err)
	}
	if p.git == nil {
		return fail("this node's git endpoint is off")
	}
	s := p.git
	write := service == "git-receive-pack"
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	access, err := p.gitAccess(actx, &corpusv1.GitAccessRequest{Fingerprint: fp, Project: project, Env: env, Write: write, From: from})
	cancel()
	if err != nil {
		return fail("cannot reach the coordinator: %v", err)
	}
	if !access.Allowed {
		p.logger.Info("git: access refused", "user", user, "project", project, "service", service, "reason", access.Reason)
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
		cmd.Env = append(cmd.Env, githook.EnvSocket+"="+s.hooks.Path(), githook.EnvSession+"="+token, hookEnvBin+"="+bin)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = rw, rw, stderr
	p.logger.Info("git: serving", "user", user, "project", project, "env", access.Env.GetName(), "service", service)
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		return fail("running %s: %v", service, err)
	}
	return 0
}

// preReceiveHook hands the push to the agent (see githook.Run).
const preReceiveHook = "#!/bin/sh\n# Written by the corpus agent: deploys before the push is accepted.\nexec \"$" + hookEnvBin + "\" git-hook pre-receive\n"

// ensureRepo returns the bare repository of a project environment,
// creating it and (re)writing its settings and hook.
func (s *gitServer) ensureRepo(project string, env *corpusv1.ProjectEnv) (string, error) {
	repo := filepath.Join(s.root, project+"-"+env.GetName()+".git")
	defer s.repos.Lock(repo)()
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
		{"receive.maxInputSize", fmt.Sprint(s.p.maxPushBytes)},
		{"receive.fsckObjects", "true"},
		{"core.hooksPath", filepath.Dir(s.hookPath())},
	}
	for _, kv := range settings {
		if out, err := exec.Command("git", "--git-dir", repo, "config", kv[0], kv[1]).CombinedOutput(); err != nil {
			return "", fmt.Errorf("git config %s: %v: %s", kv[0], err, out)
		}
	}
	return repo, nil
}

// hookPath is the pre-receive hook every repository runs (written once,
// when the pipeline starts).
func (s *gitServer) hookPath() string { return filepath.Join(s.root, ".hooks", "pre-receive") }

// lookup finds a push by its hook token.
func (s *gitServer) lookup(token string) *pushSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[token]
}
