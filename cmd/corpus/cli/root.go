// Package cli is the corpus command tree: daemons (coordinator, agent,
// dev) and the client commands that talk to a coordinator's API.
package cli

import (
	"context"
	"crypto/tls"
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

	"corpus/coordinator"
	"corpus/internal/pki"
	"corpus/internal/rpc"
	"corpus/internal/version"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// exitError carries a specific exit code (guest exec passes the command's
// code through).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// globals are the flags every client command shares.
type globals struct {
	env        string
	address    string
	token      string
	caFile     string
	configPath string
	json       bool
	// consistent asks for linearizable reads (--consistent).
	consistent bool
	stdout     io.Writer
	stderr     io.Writer
}

// Main runs the command line and returns the process exit code.
func Main(args []string) int {
	g := &globals{stdout: os.Stdout, stderr: os.Stderr}
	root := newRoot(g)
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
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg := ce.Message()
		switch ce.Code() {
		case connect.CodeUnavailable:
			if strings.Contains(msg, "connect: connection refused") || strings.Contains(msg, "dial tcp") {
				return msg + " (is the coordinator running? start one with `corpus dev`, or pick another with --env/--address)"
			}
		case connect.CodeUnauthenticated:
			return msg
		}
		return msg
	}
	return err.Error()
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "corpus",
		Short:         "corpus runs guests (LXC, VMs, Kubernetes workloads) on your own nodes",
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(g.stdout)
	pf := root.PersistentFlags()
	pf.StringVar(&g.env, "env", os.Getenv("CORPUS_ENV"), "named environment from the config file (env CORPUS_ENV)")
	pf.StringVar(&g.address, "address", os.Getenv("CORPUS_ADDR"), "coordinator API address host:port, overriding the environment's (env CORPUS_ADDR)")
	pf.StringVar(&g.token, "token", os.Getenv("CORPUS_TOKEN"), "API token, overriding the environment's (env CORPUS_TOKEN)")
	pf.StringVar(&g.caFile, "ca-cert", os.Getenv("CORPUS_CA_CERT"), "cluster CA certificate file to trust, overriding the environment's (env CORPUS_CA_CERT; on a coordinator: DATA_DIR/tls/ca.crt)")
	pf.StringVar(&g.configPath, "config-file", defaultConfigPath(), "CLI config file")
	pf.BoolVar(&g.json, "json", false, "print machine-readable JSON")
	pf.BoolVar(&g.consistent, "consistent", false, "linearizable reads: the replica asked first confirms with the leader that it has every acknowledged write (a round trip more)")
	root.AddCommand(
		newCoordinatorCmd(g),
		newAgentCmd(g),
		newProxyCmd(g),
		newDevCmd(g),
		newStatusCmd(g),
		newOperatorCmd(g),
		newTLSCmd(g),
		newImageCmd(g),
		newAuditCmd(g),
		newLoginCmd(g),
		newNodeCmd(g),
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
	refuseUnknownCommands(root)
	return root
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

// endpoint resolves which coordinator to call, with what credential and
// trusting which CA: the chosen environment with flags and CORPUS_*
// variables applied.
func (g *globals) endpoint() (Environment, error) {
	var e Environment
	cfg, err := loadClientConfig(g.configPath)
	if err != nil {
		return e, err
	}
	name := g.env
	if name == "" {
		name = cfg.Current
	}
	if name != "" {
		ce, ok := cfg.Environments[name]
		if !ok {
			return e, fmt.Errorf("environment %q is not in %s (known: %s); add it with `corpus env add`", name, g.configPath, strings.Join(cfg.names(), ", "))
		}
		e = *ce
	}
	if g.address != "" {
		e.Address = g.address
	}
	if g.token != "" {
		e.Token = g.token
	}
	if g.caFile != "" {
		b, err := os.ReadFile(g.caFile)
		if err != nil {
			return e, fmt.Errorf("--ca-cert: %w", err)
		}
		e.CACert = string(b)
	}
	if e.Address == "" {
		return e, errors.New("no coordinator configured: run `corpus dev`, or pass --address, or add one with `corpus env add`")
	}
	return e, nil
}

// trust returns the TLS configuration that trusts the environment's CA
// and nothing else, and wants a coordinator at the other end.
func trust(e Environment) (*tls.Config, error) {
	if e.CACert == "" {
		return nil, fmt.Errorf("no CA to trust for the coordinator at %s: pass --ca-cert FILE (on a coordinator it is DATA_DIR/%s/%s) or save it with `corpus login --ca-cert`", e.Address, coordinator.TLSDir, coordinator.CACertFile)
	}
	ca, err := pki.ParseCert([]byte(e.CACert))
	if err != nil {
		return nil, fmt.Errorf("the CA certificate to trust: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pki.ClientConfig(pool, nil, pki.RoleCoordinator, ""), nil
}

// clients are the API clients of the chosen coordinator.
type clients struct {
	cluster  corpusv1connect.ClusterServiceClient
	nodes    corpusv1connect.NodeServiceClient
	guests   corpusv1connect.GuestServiceClient
	ingress  corpusv1connect.IngressServiceClient
	dns      corpusv1connect.DnsServiceClient
	volumes  corpusv1connect.VolumeServiceClient
	users    corpusv1connect.UserServiceClient
	projects corpusv1connect.ProjectServiceClient
	audit    corpusv1connect.AuditServiceClient
	services corpusv1connect.ServiceServiceClient
	// extensions is the admission extensions' service.
	extensions corpusv1connect.ExtensionServiceClient
}

func (g *globals) clients() (*clients, error) {
	e, err := g.endpoint()
	if err != nil {
		return nil, err
	}
	return newClients(e, g.consistent)
}

// newClients returns clients of the API an environment names, trusting
// its CA and presenting its token ("" for none); consistent asks for
// linearizable reads.
func newClients(e Environment, consistent bool) (*clients, error) {
	tc, err := trust(e)
	if err != nil {
		return nil, err
	}
	base := rpc.BaseURL(e.Address)
	hc := rpc.HTTPClient(tc)
	// An election takes about a second: calls wait it out.
	interceptors := []connect.Interceptor{rpc.Bearer(e.Token), rpc.RetryWithoutLeader(10 * time.Second)}
	if consistent {
		interceptors = append(interceptors, rpc.Linearizable())
	}
	opt := connect.WithInterceptors(interceptors...)
	return &clients{
		cluster:  corpusv1connect.NewClusterServiceClient(hc, base, opt),
		nodes:    corpusv1connect.NewNodeServiceClient(hc, base, opt),
		guests:   corpusv1connect.NewGuestServiceClient(hc, base, opt),
		ingress:  corpusv1connect.NewIngressServiceClient(hc, base, opt),
		dns:      corpusv1connect.NewDnsServiceClient(hc, base, opt),
		volumes:  corpusv1connect.NewVolumeServiceClient(hc, base, opt),
		users:    corpusv1connect.NewUserServiceClient(hc, base, opt),
		projects: corpusv1connect.NewProjectServiceClient(hc, base, opt),
		audit:    corpusv1connect.NewAuditServiceClient(hc, base, opt),
		services: corpusv1connect.NewServiceServiceClient(hc, base, opt),

		extensions: corpusv1connect.NewExtensionServiceClient(hc, base, opt),
	}, nil
}

// call makes one API call against the chosen coordinator, then prints the
// response: as JSON with --json, else through human.
func call[T any](g *globals, ctx context.Context, do func(context.Context, *clients) (*connect.Response[T], error), human func(*T) error) error {
	c, err := g.clients()
	if err != nil {
		return err
	}
	res, err := do(ctx, c)
	if rpc.Gone(err) {
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
// after its earlier try was cut short by a leader change (rpc.Gone):
// what was asked for holds, so the command succeeds, saying so.
func (g *globals) goneAlready() error {
	if g.json {
		return g.printJSONValue(map[string]bool{"already_gone": true})
	}
	_, err := fmt.Fprintln(g.stdout, "already gone: an earlier try of this call, cut short by a leader change, may have removed it")
	return err
}

var jsonOut = protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}

// printJSON writes a message as JSON.
func (g *globals) printJSON(m proto.Message) error {
	b, err := jsonOut.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(g.stdout, string(b))
	return err
}

// printJSONValue writes a plain Go value (not a message) as JSON.
func (g *globals) printJSONValue(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
