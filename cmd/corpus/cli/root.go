// Package cli is the corpus command tree: the client commands, which
// talk to a coordinator through package client and the API alone, and
// the root they hang from. The commands that run on a cluster's hosts
// (the daemons, image builds) are added to the same root by the binary
// (see Main).
package cli

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"corpus/client"
	"corpus/internal/rpc"
	"corpus/internal/version"
)

// exitError carries a specific exit code (guest exec passes the command's
// code through).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Globals are the flags every command shares and where commands write.
// The target's empty fields are filled from the CORPUS_* variables once
// the flags are parsed (client.Target.FillFromEnv).
type Globals struct {
	client.Target
	json bool
	// consistent asks for linearizable reads (--consistent).
	consistent bool
	stdout     io.Writer
	stderr     io.Writer
}

// NewGlobals returns the shared flags of a command line writing to
// stdout and stderr.
func NewGlobals(stdout, stderr io.Writer) *Globals {
	return &Globals{stdout: stdout, stderr: stderr}
}

// Stdout is where commands write what they were asked for.
func (g *Globals) Stdout() io.Writer { return g.stdout }

// Stderr is where commands write progress and diagnostics.
func (g *Globals) Stderr() io.Writer { return g.stderr }

// JSON says whether --json asks for machine-readable output.
func (g *Globals) JSON() bool { return g.json }

// Commands adds commands to the root: the binary gives those of the
// hosts (package daemon). A command named as one the root has already
// adds its subcommands to that one (corpus node add-k8s).
type Commands func(*Globals) []*cobra.Command

// Main runs the command line and returns the process exit code.
func Main(args []string, more ...Commands) int {
	g := NewGlobals(os.Stdout, os.Stderr)
	root := NewRoot(g, more...)
	root.SetArgs(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(g.stderr, "error: "+describe(err))
	return 1
}

// describe turns an error into the one line a user reads.
func describe(err error) string {
	if ua := (x509.UnknownAuthorityError{}); errors.As(err, &ua) {
		return err.Error() + " (the coordinator's certificate is from no CA this environment trusts: if the cluster CA was rotated, " +
			"an operator prints the CAs to trust with `corpus operator ca status --pem`; save them with `corpus env add NAME --address ADDR --ca-cert FILE`)"
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg := ce.Message()
		switch ce.Code() {
		case connect.CodeUnavailable:
			// Only our own call failing to connect is about the
			// coordinator; a coordinator that could not reach a node's
			// agent answered, and its message names the node.
			if _, ok := rpc.Unreachable(err); ok {
				return msg + " (is the coordinator running? start one with `corpus dev`, or pick another with --env/--address)"
			}
		case connect.CodeUnauthenticated:
			return msg
		}
		return msg
	}
	return err.Error()
}

// NewRoot returns the command tree: the client commands and more.
func NewRoot(g *Globals, more ...Commands) *cobra.Command {
	root := &cobra.Command{
		Use:           "corpus",
		Short:         "corpus runs guests (LXC, VMs, Kubernetes workloads) on your own nodes",
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		// After the flags, before any command: the CORPUS_* variables
		// are read here, not made flag defaults (--help prints those).
		PersistentPreRun: func(*cobra.Command, []string) { g.FillFromEnv() },
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(g.stdout)
	pf := root.PersistentFlags()
	pf.StringVar(&g.Env, "env", "", "named environment from the config file (env CORPUS_ENV; default: the file's current one)")
	pf.StringVar(&g.Address, "address", "", "coordinator API address host:port, overriding the environment's (env CORPUS_ADDR)")
	pf.StringVar(&g.Token, "token", "", "API token, overriding the environment's (env CORPUS_TOKEN)")
	pf.StringVar(&g.CAFile, "ca-cert", "", "cluster CA certificate file to trust, overriding the environment's (env CORPUS_CA_CERT; on a coordinator: DATA_DIR/tls/ca.crt)")
	pf.StringVar(&g.ConfigFile, "config-file", "", "CLI config file (default $XDG_CONFIG_HOME/corpus/config.yaml, else ~/.config/corpus/config.yaml)")
	pf.BoolVar(&g.json, "json", false, "print machine-readable JSON")
	pf.BoolVar(&g.consistent, "consistent", false, "linearizable reads: the replica asked first confirms with the leader that it has every acknowledged write (a round trip more)")
	root.AddCommand(
		newStatusCmd(g),
		newOperatorCmd(g),
		newAuditCmd(g),
		newLoginCmd(g),
		newNodeCmd(g),
		newImageCmd(g),
		newGuestCmd(g),
		newIngressCmd(g),
		newDNSCmd(g),
		newVolumeCmd(g),
		newEnvCmd(g),
		newUserCmd(g),
		newKeyCmd(g),
		newProjectCmd(g),
		newReleaseCmd(g),
		newRollbackCmd(g),
		newConfigCmd(g),
		newServiceCmd(g),
		newExtensionCmd(g),
		newRegistryCmd(g),
		newPsCmd(g),
		newLogsCmd(g),
		newShellCmd(g),
		newRestartCmd(g),
		newDeployCmd(g),
		newScaleCmd(g),
		newAutoscaleCmd(g),
		newSwitchCmd(g),
		newVersionCmd(g),
		newDocsCmd(g),
	)
	root.AddCommand(newSeedAliases(g)...)
	for _, m := range more {
		graft(root, m(g))
	}
	refuseUnknownCommands(root)
	return root
}

// graft adds cmds below parent; one named as a command parent has
// already gives its subcommands to that one instead.
func graft(parent *cobra.Command, cmds []*cobra.Command) {
	for _, c := range cmds {
		var have *cobra.Command
		for _, h := range parent.Commands() {
			if h.Name() == c.Name() {
				have = h
			}
		}
		if have == nil {
			parent.AddCommand(c)
			continue
		}
		graft(have, c.Commands())
	}
}

// refuseUnknownCommands makes every command that only groups others
// (corpus, corpus guest, ...) fail on an argument naming none of them,
// with the nearest names as suggestions; cobra would print the group's
// help and exit 0 below the root, so `corpus guest lst` looked fine.
// Without an argument, a group prints its help as before.
func refuseUnknownCommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownCommands(sub)
	}
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.SuggestionsMinimumDistance = 2 // cobra's own default, set where it suggests itself
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("%s: unknown command %q", cmd.CommandPath(), args[0])
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			for i := range s {
				s[i] = strconv.Quote(s[i])
			}
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return fmt.Errorf("%s (`%s --help` lists its commands)", msg, cmd.CommandPath())
	}
}

// Endpoint resolves which coordinator to call, with what credential and
// trusting which CA: the chosen environment with flags and CORPUS_*
// variables applied.
func (g *Globals) Endpoint() (client.Environment, error) { return g.Target.Resolve() }

// Clients returns the API clients of the chosen coordinator.
func (g *Globals) Clients() (*client.Clients, error) {
	e, err := g.Endpoint()
	if err != nil {
		return nil, err
	}
	return client.New(e, g.consistent)
}

// call makes one API call against the chosen coordinator, then prints the
// response: as JSON with --json, else through human.
func call[T any](g *Globals, ctx context.Context, do func(context.Context, *client.Clients) (*connect.Response[T], error), human func(*T) error) error {
	c, err := g.Clients()
	if err != nil {
		return err
	}
	res, err := do(ctx, c)
	if client.Gone(err) {
		return g.goneAlready()
	}
	if err != nil {
		return err
	}
	if m, ok := any(res.Msg).(proto.Message); ok && g.json {
		return g.printJSON(m)
	}
	return human(res.Msg)
}

// goneAlready answers a removal whose retry found nothing to remove
// after its earlier try was cut short by a leader change (client.Gone):
// what was asked for holds, so the command succeeds, saying so.
func (g *Globals) goneAlready() error {
	if g.json {
		return g.PrintJSONValue(map[string]bool{"already_gone": true})
	}
	_, err := fmt.Fprintln(g.stdout, "already gone: an earlier try of this call, cut short by a leader change, may have removed it")
	return err
}

var jsonOut = protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}

// printJSON writes a message as JSON.
func (g *Globals) printJSON(m proto.Message) error {
	b, err := jsonOut.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(g.stdout, string(b))
	return err
}

// PrintJSONValue writes a plain Go value (not a message) as JSON.
func (g *Globals) PrintJSONValue(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// pastDeadline reports whether ctx's deadline has passed. A call that
// fails at its deadline can return before the context's own timer has
// fired on a busy machine (ctx.Err() still nil), or with the server's
// deadline_exceeded: the clock decides, not the timer.
func pastDeadline(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}
