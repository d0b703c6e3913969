package agent

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"

	"corpus/agent/deploy"
	"corpus/agent/runtime/supervisor"
	"corpus/agent/shell"
	"corpus/agent/sshd"
	"corpus/drivers"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// shellClient is a Shell call's stream as agent/shell sees it.
type shellClient struct {
	stream *connect.BidiStream[corpusv1.ShellInput, corpusv1.ExecOutput]
}

func (c shellClient) Recv() (shell.Input, error) {
	m, err := c.stream.Receive()
	if err != nil {
		return shell.Input{}, err
	}
	in := shell.Input{Stdin: m.Stdin, CloseStdin: m.CloseStdin}
	if sz := m.GetSize(); sz != nil {
		in.Rows, in.Cols = shell.ClampSize(sz.Rows), shell.ClampSize(sz.Cols)
	}
	return in, nil
}

func (c shellClient) Send(stdout, stderr []byte) error {
	return c.stream.Send(&corpusv1.ExecOutput{Stdout: stdout, Stderr: stderr})
}

// shellRequest prepares a session in guest name of this node. With
// project, the command runs with the environment the project's
// processes get there (corpus-supervisor env, when a release serves);
// with a terminal, corpus-supervisor tty makes it the command's own and
// TERM is set. The supervisor binary goes into the guest first for
// either.
func (a *Agent) shellRequest(ctx context.Context, name, project string, argv []string, env map[string]string, dir string,
	tty bool, term string, size *corpusv1.TerminalSize) (shell.Request, drivers.Driver, error) {
	g := a.desiredByName(name)
	if g == nil {
		return shell.Request{}, nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("guest %q is not on node %s", name, a.id.NodeName))
	}
	d, ok := a.drivers[g.Spec.GetDriver()]
	if !ok || !d.Capabilities().Exec {
		return shell.Request{}, nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("driver %s cannot run commands in guest %s", g.Spec.GetDriver(), g.Name))
	}
	req := shell.Request{Guest: g.Name, Argv: argv, Env: env, Dir: dir, TTY: tty}
	installed := false
	install := func(what string) error {
		if installed {
			return nil
		}
		if err := a.runtime.Install(ctx, d, g.Name); err != nil {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("preparing %s in guest %s: %w", what, g.Name, err))
		}
		installed = true
		return nil
	}
	if project != "" {
		rel, file, serving, err := deploy.ServingEnv(ctx, d, g.Name, project)
		if err != nil {
			return req, nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("finding the release project %s serves in guest %s: %w", project, g.Name, err))
		}
		if serving {
			if err := install("the project's environment"); err != nil {
				return req, nil, err
			}
			req.Argv = append([]string{supervisor.Binary, "env", rel, file}, argv...)
		}
	}
	if !tty {
		return req, d, nil
	}
	switch caps := d.Capabilities(); {
	case caps.ExecTerminal:
		if err := install("the terminal"); err != nil {
			return req, nil, err
		}
		req.Wrap = func(argv []string) []string { return append([]string{supervisor.Binary, "tty"}, argv...) }
	case caps.ExecTTYStream:
		req.TTYStream = true // the guest's side opens it (a pod's kubelet)
	default:
		return req, nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("driver %s gives guests no terminal (a VM's guest agent runs commands without one); run the command without a terminal", g.Spec.GetDriver()))
	}
	req.Env = map[string]string{"TERM": "xterm"}
	if validTerm(term) {
		req.Env["TERM"] = term
	}
	for k, v := range env {
		req.Env[k] = v
	}
	if size != nil {
		req.Rows, req.Cols = shell.ClampSize(size.Rows), shell.ClampSize(size.Cols)
	}
	return req, d, nil
}

// Shell runs an interactive command in a guest of this node.
func (s *agentAPI) Shell(ctx context.Context, stream *connect.BidiStream[corpusv1.ShellInput, corpusv1.ExecOutput]) error {
	a := s.a
	if err := a.checkCaller(stream.RequestHeader()); err != nil {
		return err
	}
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the first message of a shell opens it"))
	}
	if err := names.Validate("guest", open.Name); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	if len(open.Argv) == 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("no command given"))
	}
	if first.Project != "" {
		if err := names.Validate("project", first.Project); err != nil {
			return connect.NewError(connect.CodeInvalidArgument, err)
		}
	}
	req, d, err := a.shellRequest(ctx, open.Name, first.Project, open.Argv, open.Env, open.Dir, first.Tty, first.Term, first.GetSize())
	if err != nil {
		return err
	}
	code, err := a.shells.Run(ctx, d, req, shellClient{stream})
	switch {
	case errors.Is(err, shell.ErrBusy):
		return connect.NewError(connect.CodeResourceExhausted, err)
	case errors.Is(err, drivers.ErrNotRunning):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, drivers.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case err != nil && ctx.Err() != nil:
		return nil // the caller went away
	case err != nil:
		return connect.NewError(connect.CodeInternal, fmt.Errorf("shell in %s: %w", req.Guest, err))
	}
	return stream.Send(&corpusv1.ExecOutput{Exited: true, ExitCode: int32(code)})
}

// validTerm: a terminal type name (xterm-256color, screen.xterm).
func validTerm(t string) bool {
	if t == "" || len(t) > 64 {
		return false
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '+') {
			return false
		}
	}
	return true
}

// sshHost is the agent as its SSH endpoint (agent/sshd) sees it.
type sshHost struct{ a *Agent }

var _ sshd.Host = sshHost{}

func (h sshHost) CallCoordinator(f func(corpusv1connect.AgentServiceClient) error) error {
	return h.a.callCoordinator(f)
}

func (h sshHost) ServeGit(ctx context.Context, user, fp, command string, rw io.ReadWriter, stderr io.Writer) int {
	return h.a.deploys.ServeGit(ctx, user, fp, command, rw, stderr)
}

func (h sshHost) ShellRequest(ctx context.Context, name, project string, argv []string, env map[string]string, dir string,
	tty bool, term string, size *corpusv1.TerminalSize) (shell.Request, drivers.Driver, error) {
	return h.a.shellRequest(ctx, name, project, argv, env, dir, tty, term, size)
}
