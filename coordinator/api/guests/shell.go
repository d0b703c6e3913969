package guests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	corpusv1 "corpus/proto/corpus/v1"

	"corpus/coordinator/api"
	"corpus/coordinator/auth"
	"corpus/internal/names"

	"connectrpc.com/connect"
)

// relayShell passes the session on to the node's agent and back; it
// returns the command's exit status (-1 when none came).
func (s *guestService) relayShell(ctx context.Context, n *corpusv1.Node, first *corpusv1.ShellInput,
	stream *connect.BidiStream[corpusv1.ShellInput, corpusv1.ExecOutput]) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	up := s.b.AgentClient(n).Shell(ctx)
	// The call ends with its context (its token revoked, the coordinator
	// stopping) while the caller's side is still open: the agent's input
	// ends with it. Until it does, the HTTP/2 client is blocked reading
	// that input and does not see the context end, so the session would
	// stay open on the agent and here.
	stop := context.AfterFunc(ctx, func() { up.CloseRequest() })
	defer stop()
	// A stream the agent refused says io.EOF here, and why on Receive.
	if err := up.Send(first); err != nil && !errors.Is(err, io.EOF) {
		return -1, api.FromAgent(n, "shell", err)
	}
	go func() {
		for {
			in, err := stream.Receive()
			if err != nil {
				// The caller closed its side (or went): the agent's
				// input ends; a gone caller also ends the call's ctx.
				up.CloseRequest()
				return
			}
			if in.Open != nil {
				continue // one session per call
			}
			if err := up.Send(in); err != nil {
				return
			}
		}
	}()
	defer up.CloseResponse()
	for {
		out, err := up.Receive()
		if err != nil {
			if ctx.Err() != nil {
				return -1, nil
			}
			return -1, api.FromAgent(n, "shell", err)
		}
		if err := stream.Send(out); err != nil {
			return -1, nil
		}
		if out.Exited {
			return int(out.ExitCode), nil
		}
	}
}

// Shell relays an interactive session between the caller and the agent
// of the guest's node. It is audited when it starts (before anything
// runs) and when it ends, with how long it lasted and its exit status;
// what is typed and printed is never recorded.
func (s *guestService) Shell(ctx context.Context, stream *connect.BidiStream[corpusv1.ShellInput, corpusv1.ExecOutput]) error {
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	m := first.GetOpen()
	if m == nil {
		return api.ToConnect(api.Invalidf("the first message of a shell must open it (name and command)"))
	}
	if err := names.Validate("guest", m.Name); err != nil {
		return api.ToConnect(err)
	}
	if len(m.Argv) == 0 {
		return api.ToConnect(api.Invalidf("no command given: corpus guest exec -it %s -- CMD ARGS", m.Name))
	}
	g, n, err := s.execTarget(ctx, m.Name)
	if err != nil {
		return err
	}
	if first.Project != "" {
		if p, _ := s.b.Store.Read().ProjectOfGuest(g.Id); p.GetName() != first.Project {
			return api.ToConnect(api.Invalidf("guest %s does not run project %s: its environment is for the project's guests (corpus project show %s)", g.Name, first.Project, first.Project))
		}
	}
	actor := auth.FromContext(ctx).String()
	kind := "without a terminal"
	if first.Tty {
		kind = "on a terminal"
	}
	what := fmt.Sprintf("started %s with %d arguments %s", filepath.Base(m.Argv[0]), len(m.Argv)-1, kind)
	if err := s.b.Audit().Record(ctx, actor, "shell_guest", g.Name, what); err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the session could not be recorded in the audit log, so it was not opened: %w", err))
	}
	start := time.Now()
	code, err := s.relayShell(ctx, n, first, stream)
	result := fmt.Sprintf("ended after %s", time.Since(start).Round(time.Second))
	switch {
	case code >= 0:
		result += fmt.Sprintf(", exit status %d", code)
	case err != nil:
		result += ": " + err.Error()
	default:
		result += ": the client went away"
	}
	if aerr := s.b.Audit().Record(context.WithoutCancel(ctx), actor, "shell_guest", g.Name, result); aerr != nil {
		s.b.Logger.Warn("recording the end of a shell session", "guest", g.Name, "error", aerr)
	}
	return err
}
