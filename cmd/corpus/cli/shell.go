package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"corpus/client"
	corpusv1 "corpus/proto/corpus/v1"
)

// shellOut is what a session printed, kept for --json.
type shellOut struct {
	stdout, stderr strings.Builder
}

// runShell runs an interactive session (GuestService.Shell): this
// process's stdin goes to the command as it comes, its output comes back
// as it is printed. With tty, the local terminal is put in raw mode (and
// restored on every way out), its size is sent at the start and on every
// change, and keys such as Ctrl-C reach the command. With project, the
// command gets the environment of the project's processes. It returns
// the command's exit status.
func (g *Globals) runShell(ctx context.Context, c *client.Clients, open *corpusv1.ExecGuestRequest, project string, tty bool, keep *shellOut) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := c.Guests.Shell(ctx)
	defer stream.CloseResponse()
	var sendMu sync.Mutex
	send := func(m *corpusv1.ShellInput) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	first := &corpusv1.ShellInput{Open: open, Tty: tty, Project: project}
	if tty {
		in := int(os.Stdin.Fd())
		if !term.IsTerminal(in) {
			return -1, errors.New("-t needs a terminal on stdin; without -t, stdin is passed through as it is")
		}
		first.Term = os.Getenv("TERM")
		first.Size = terminalSize(in)
		old, err := term.MakeRaw(in)
		if err != nil {
			return -1, fmt.Errorf("putting the terminal in raw mode: %w", err)
		}
		defer term.Restore(in, old)
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-winch:
					send(&corpusv1.ShellInput{Size: terminalSize(in)})
				}
			}
		}()
	}
	// A refused session's Send says io.EOF; Receive below says why.
	if err := send(first); err != nil && !errors.Is(err, io.EOF) {
		return -1, err
	}
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := os.Stdin.Read(buf)
			if n > 0 {
				if send(&corpusv1.ShellInput{Stdin: append([]byte(nil), buf[:n]...)}) != nil {
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) && !tty {
					send(&corpusv1.ShellInput{CloseStdin: true})
				}
				return
			}
		}
	}()
	for {
		out, err := stream.Receive()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return -1, errors.New("the session ended without an exit status")
			}
			if ctx.Err() != nil || connect.CodeOf(err) == connect.CodeCanceled {
				return -1, errors.New("the session was interrupted")
			}
			return -1, err
		}
		if keep != nil {
			keep.stdout.Write(out.Stdout)
			keep.stderr.Write(out.Stderr)
		} else {
			g.stdout.Write(out.Stdout)
			g.stderr.Write(out.Stderr)
		}
		if out.Exited {
			return int(out.ExitCode), nil
		}
	}
}

func terminalSize(fd int) *corpusv1.TerminalSize {
	w, h, err := term.GetSize(fd)
	if err != nil || w <= 0 || h <= 0 {
		return &corpusv1.TerminalSize{Rows: 24, Cols: 80}
	}
	return &corpusv1.TerminalSize{Rows: uint32(h), Cols: uint32(w)}
}

// loginShell is what `corpus shell` runs: bash where the image has it,
// else sh, as a login shell, in the serving release when there is one.
func loginShell(project string) []string {
	return []string{"/bin/sh", "-c", `cd "/srv/projects/$1/current" 2>/dev/null || cd /
if command -v bash >/dev/null 2>&1; then exec bash -l; fi
exec sh -l`, "sh", project}
}

func newShellCmd(g *Globals) *cobra.Command {
	var env string
	var noTTY bool
	cmd := &cobra.Command{
		Use:   "shell PROJECT [--env ENV] [-- CMD [ARGS...]]",
		Short: "Open a shell (or run a command) in a project environment's guest, in its serving release",
		Long: `Open an interactive shell in the guest of a project environment, as root, in
the serving release's folder (bash where the image has it, else sh), with
the environment the project's processes get (its config and secrets,
links, corpus.yaml's env). With a command after --, run that instead. A
terminal is used when stdin is one (unless --no-tty); the session is
recorded in the audit log (who, where, when, how long, exit status),
never what is typed.`,
		Example: `  corpus shell site
  corpus shell site --env prod -- cat /etc/os-release
  echo 'ls /srv' | corpus shell site`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.Clients()
			if err != nil {
				return err
			}
			p, err := c.Projects.GetProject(cmd.Context(), connect.NewRequest(&corpusv1.GetProjectRequest{Name: args[0]}))
			if err != nil {
				return err
			}
			var ev *corpusv1.ProjectEnvView
			var all []string
			for _, e := range p.Msg.Project.GetEnvs() {
				all = append(all, e.Name)
				if e.Name == env || (env == "" && len(p.Msg.Project.GetEnvs()) == 1) {
					ev = e
				}
			}
			if ev == nil {
				return fmt.Errorf("project %s has environments %s: choose one with --env", args[0], strings.Join(all, ", "))
			}
			argv := loginShell(args[0])
			if len(args) > 1 {
				argv = args[1:]
			}
			tty := !noTTY && term.IsTerminal(int(os.Stdin.Fd())) && len(args) == 1
			open := &corpusv1.ExecGuestRequest{Name: ev.GuestName, Argv: argv, Dir: "/srv/projects/" + args[0] + "/current"}
			code, err := g.runShell(cmd.Context(), c, open, args[0], tty, nil)
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&env, "env", "", "the project's environment (needed when it has several)")
	cmd.Flags().BoolVar(&noTTY, "no-tty", false, "no terminal even when stdin is one")
	return cmd
}
