package shell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	"corpus/agent/deploy"
	"corpus/agent/runtime"
	"corpus/agent/runtime/supervisor"
	"corpus/drivers"
	"corpus/internal/names"
	"corpus/internal/rpc"
	corpusv1 "corpus/proto/corpus/v1"
)

// Guests finds the guests of this node by name.
type Guests interface {
	// Guest returns the guest of that name this node runs and its
	// driver (nil, nil when there is none).
	Guest(name string) (*corpusv1.Guest, drivers.Driver)
}

// Sessions serves the Exec and Shell procedures of the agent's API and
// prepares the SSH endpoint's sessions (Request); the caller is checked
// before.
type Sessions struct {
	Shells  *Manager
	Guests  Guests
	Runtime *runtime.Runtime
	// Node is this node's name, for errors.
	Node func() string
}

// Exec runs a command in a guest of this node and streams its output.
func (s Sessions) Exec(ctx context.Context, req *connect.Request[corpusv1.ExecGuestRequest], stream *connect.ServerStream[corpusv1.ExecOutput]) error {
	m := req.Msg
	if err := names.Validate("guest", m.Name); err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	if len(m.Argv) == 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("no command given"))
	}
	g, d := s.Guests.Guest(m.Name)
	if g == nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("guest %q is not on node %s", m.Name, s.Node()))
	}
	if d == nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("driver %s is not available on node %s", g.Spec.GetDriver(), s.Node()))
	}
	if !d.Capabilities().Exec {
		return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("driver %s cannot exec", g.Spec.GetDriver()))
	}
	var mu sync.Mutex
	send := func(out *corpusv1.ExecOutput) error {
		mu.Lock()
		defer mu.Unlock()
		return stream.Send(out)
	}
	code, err := d.Exec(ctx, g.Name, drivers.ExecRequest{
		Argv:   m.Argv,
		Env:    m.Env,
		Dir:    m.Dir,
		Stdin:  bytes.NewReader(m.Stdin),
		Stdout: rpc.StreamWriter(func(p []byte) error { return send(&corpusv1.ExecOutput{Stdout: p}) }),
		Stderr: rpc.StreamWriter(func(p []byte) error { return send(&corpusv1.ExecOutput{Stderr: p}) }),
	})
	switch {
	case errors.Is(err, drivers.ErrNotRunning):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, drivers.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case err != nil:
		return connect.NewError(connect.CodeInternal, fmt.Errorf("exec in %s: %w", g.Name, err))
	}
	return send(&corpusv1.ExecOutput{Exited: true, ExitCode: int32(code)})
}

// shellClient is a Shell call's stream as a session sees it.
type shellClient struct {
	stream *connect.BidiStream[corpusv1.ShellInput, corpusv1.ExecOutput]
}

func (c shellClient) Recv() (Input, error) {
	m, err := c.stream.Receive()
	if err != nil {
		return Input{}, err
	}
	in := Input{Stdin: m.Stdin, CloseStdin: m.CloseStdin}
	if sz := m.GetSize(); sz != nil {
		in.Rows, in.Cols = ClampSize(sz.Rows), ClampSize(sz.Cols)
	}
	return in, nil
}

func (c shellClient) Send(stdout, stderr []byte) error {
	return c.stream.Send(&corpusv1.ExecOutput{Stdout: stdout, Stderr: stderr})
}

// Request prepares a session in guest name of this node. With project,
// the command runs with the environment the project's processes get
// there (corpus-supervisor env, when a release serves); with a
// terminal, corpus-supervisor tty makes it the command's own and TERM is
// set. The supervisor binary goes into the guest first for either.
func (s Sessions) Request(ctx context.Context, name, project string, argv []string, env map[string]string, dir string,
	tty bool, term string, size *corpusv1.TerminalSize) (Request, drivers.Driver, error) {
	g, d := s.Guests.Guest(name)
	if g == nil {
		return Request{}, nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("guest %q is not on node %s", name, s.Node()))
	}
	if d == nil || !d.Capabilities().Exec {
		return Request{}, nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("driver %s cannot run commands in guest %s", g.Spec.GetDriver(), g.Name))
	}
	req := Request{Guest: g.Name, Argv: argv, Env: env, Dir: dir, TTY: tty}
	installed := false
	install := func(what string) error {
		if installed {
			return nil
		}
		if err := s.Runtime.Install(ctx, d, g.Name); err != nil {
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
		req.Rows, req.Cols = ClampSize(size.Rows), ClampSize(size.Cols)
	}
	return req, d, nil
}

// Shell runs an interactive command in a guest of this node.
func (s Sessions) Shell(ctx context.Context, stream *connect.BidiStream[corpusv1.ShellInput, corpusv1.ExecOutput]) error {
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
	req, d, err := s.Request(ctx, open.Name, first.Project, open.Argv, open.Env, open.Dir, first.Tty, first.Term, first.GetSize())
	if err != nil {
		return err
	}
	code, err := s.Shells.Run(ctx, d, req, shellClient{stream})
	switch {
	case errors.Is(err, ErrBusy):
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
