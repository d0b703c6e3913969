package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/crypto/ssh"

	"corpus/agent/deploy"
	"corpus/agent/shell"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// Shells over the node's SSH endpoint, the one git pushes go to, with the
// same keys and the same rights as a push (ops, and devs granted the
// project):
//
//	ssh -t -p 2222 git@NODE shell PROJECT[/ENV]            a login shell
//	ssh -p 2222 git@NODE shell PROJECT[/ENV] COMMAND...    one command
//
// The session runs in the environment's guest, which must be on this
// node (the project's git remote names it), in the serving release's
// folder, with the environment the project's processes get; it is
// recorded in the audit log as the key's owner when it starts and ends.
// Port and agent forwarding, X11 and subsystems (sftp) are refused.

const sshShellUsage = "usage: ssh -t -p PORT git@NODE shell PROJECT[/ENV] [COMMAND...]"

// sshPTY is what a pty-req asked for.
type sshPTY struct {
	Term       string
	Cols, Rows uint32
	W, H       uint32
	Modes      string
}

// sshSession is one SSH session channel: it takes requests until one
// starts a command.
type sshSession struct {
	s      *Server
	sc     *ssh.ServerConn
	ch     ssh.Channel
	pty    *sshPTY
	resize chan shell.Input
}

// shellCommand reads "shell PROJECT[/ENV] [COMMAND...]".
func shellCommand(cmd string) (project, env string, argv []string, ok bool) {
	f := strings.Fields(cmd)
	if len(f) < 2 || f[0] != "shell" {
		return "", "", nil, false
	}
	project, env, _ = strings.Cut(f[1], "/")
	if len(f) > 2 {
		argv = []string{"/bin/sh", "-c", strings.Join(f[2:], " ")}
	}
	return project, env, argv, true
}

// request handles a session request other than exec; done says the
// session is over.
func (x *sshSession) request(req *ssh.Request) (done bool) {
	switch req.Type {
	case "env":
		req.Reply(true, nil) // ignored
	case "pty-req":
		var p sshPTY
		if err := ssh.Unmarshal(req.Payload, &p); err != nil {
			req.Reply(false, nil)
			return false
		}
		x.pty = &p
		req.Reply(true, nil)
	case "window-change":
		var w struct{ Cols, Rows, W, H uint32 }
		if ssh.Unmarshal(req.Payload, &w) == nil {
			select {
			case x.resize <- shell.Input{Rows: shell.ClampSize(w.Rows), Cols: shell.ClampSize(w.Cols)}:
			default: // a burst of changes: the next one will do
			}
		}
		if req.WantReply {
			req.Reply(true, nil)
		}
	case "shell":
		req.Reply(true, nil)
		fmt.Fprintf(x.ch.Stderr(), "corpus: name the project whose guest to open a shell in\r\n%s\r\n", sshShellUsage)
		x.exit(2)
		return true
	default:
		// subsystem (sftp), x11-req, auth-agent-req@openssh.com, ...
		req.Reply(false, nil)
	}
	return false
}

func (x *sshSession) exit(code int) {
	x.ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
}

// run serves `shell PROJECT[/ENV] [COMMAND]` and returns its exit status.
func (x *sshSession) run(ctx context.Context, project, env string, argv []string) int {
	s := x.s
	crlf := "\n"
	if x.pty != nil {
		crlf = "\r\n"
	}
	fail := func(code int, format string, args ...any) int {
		fmt.Fprintf(x.ch.Stderr(), "corpus: "+format+crlf, args...)
		return code
	}
	fp := x.sc.Permissions.Extensions["fingerprint"]
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	access, err := s.gitAccess(actx, &corpusv1.GitAccessRequest{Fingerprint: fp, Project: project, Env: env, Shell: true, From: x.sc.RemoteAddr().String()})
	cancel()
	if err != nil {
		return fail(1, "cannot reach the coordinator: %v", err)
	}
	if !access.Allowed {
		s.logger.Info("ssh: shell refused", "user", access.User, "project", project, "reason", access.Reason)
		return fail(1, "%s", access.Reason)
	}
	current := deploy.ProjectsRoot + "/" + project + "/current"
	if argv == nil {
		argv = []string{"/bin/sh", "-c", `cd "$1" 2>/dev/null || cd /
if command -v bash >/dev/null 2>&1; then exec bash -l; fi
exec sh -l`, "sh", current}
	}
	tty := x.pty != nil
	var term string
	var size *corpusv1.TerminalSize
	if tty {
		term, size = x.pty.Term, &corpusv1.TerminalSize{Rows: x.pty.Rows, Cols: x.pty.Cols}
	}
	guest := access.Env.GetGuestName()
	req, d, err := s.cfg.Host.ShellRequest(ctx, guest, project, argv, nil, current, tty, term, size)
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return fail(1, "%s", ce.Message())
		}
		return fail(1, "%v", err)
	}
	kind := "without a terminal"
	if tty {
		kind = "on a terminal"
	}
	if err := s.recordShell(ctx, fp, guest, fmt.Sprintf("started %s over ssh %s", shellWhat(argv), kind)); err != nil {
		return fail(1, "the session could not be recorded in the audit log, so it was not opened: %v", err)
	}
	start := time.Now()
	code, err := s.cfg.Shells.Run(ctx, d, req, newSSHClient(x))
	result := fmt.Sprintf("ended after %s, exit status %d", time.Since(start).Round(time.Second), code)
	if err != nil {
		result = fmt.Sprintf("ended after %s: %v", time.Since(start).Round(time.Second), err)
	}
	if rerr := s.recordShell(context.WithoutCancel(ctx), fp, guest, result); rerr != nil {
		s.logger.Warn("ssh: recording the end of a shell session", "guest", guest, "error", rerr)
	}
	switch {
	case errors.Is(err, shell.ErrBusy):
		return fail(1, "%v", err)
	case err != nil:
		return fail(1, "shell in %s: %v", guest, err)
	}
	return code
}

func shellWhat(argv []string) string {
	if len(argv) == 5 && argv[1] == "-c" && strings.Contains(argv[2], "exec sh -l") {
		return "a login shell"
	}
	return "a command"
}

// recordShell records a session's start or end in the audit log.
func (s *Server) recordShell(ctx context.Context, fp, guest, result string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return s.cfg.Host.CallCoordinator(func(c corpusv1connect.AgentServiceClient) error {
		_, err := c.RecordShell(ctx, connect.NewRequest(&corpusv1.RecordShellRequest{Fingerprint: fp, Guest: guest, Result: result}))
		return err
	})
}

// sshClient is an SSH session channel as agent/shell sees it: what the
// client types, its window changes, its end of input.
type sshClient struct {
	x    *sshSession
	data chan []byte
	eof  chan struct{}
}

func newSSHClient(x *sshSession) *sshClient {
	c := &sshClient{x: x, data: make(chan []byte), eof: make(chan struct{})}
	go func() {
		defer close(c.eof)
		for {
			buf := make([]byte, 32<<10)
			n, err := x.ch.Read(buf)
			if n > 0 {
				c.data <- buf[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	return c
}

func (c *sshClient) Recv() (shell.Input, error) {
	select {
	case b := <-c.data:
		return shell.Input{Stdin: b}, nil
	case in := <-c.x.resize:
		return in, nil
	case <-c.eof:
		return shell.Input{}, io.EOF
	}
}

func (c *sshClient) Send(stdout, stderr []byte) error {
	if len(stdout) > 0 {
		if _, err := c.x.ch.Write(stdout); err != nil {
			return err
		}
	}
	if len(stderr) > 0 {
		if _, err := c.x.ch.Stderr().Write(stderr); err != nil {
			return err
		}
	}
	return nil
}
