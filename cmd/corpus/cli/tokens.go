package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/client"
	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// newUserTokenCmd manages users' API tokens.
func newUserTokenCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Issue, list and revoke users' API tokens (users manage their own)"}
	var (
		ttl  time.Duration
		desc string
	)
	create := &cobra.Command{
		Use:   "create USER [--ttl 720h] [--description TEXT]",
		Short: "Issue an API token; it is shown once (give it to `corpus login`)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			secs := int64(ttl / time.Second)
			if ttl < 0 {
				secs = -1
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.CreateTokenResponse], error) {
				return c.Users.CreateToken(ctx, connect.NewRequest(&corpusv1.CreateTokenRequest{User: args[0], TtlSeconds: secs, Description: desc}))
			}, func(m *corpusv1.CreateTokenResponse) error {
				until := "never expires"
				if m.Info.GetExpiresAt() != nil {
					until = "expires " + localTime(m.Info.ExpiresAt)
				}
				fmt.Fprintf(g.stdout, "%s\n(token %s of %s, %s; shown once: `corpus login --token ...` stores it)\n", m.Token, m.Info.Id, m.Info.User, until)
				return nil
			})
		},
	}
	create.Flags().DurationVar(&ttl, "ttl", 0, "how long the token works (default 720h; -1s never expires)")
	create.Flags().StringVar(&desc, "description", "", "what the token is for")
	list := &cobra.Command{
		Use:   "list [USER]",
		Short: "List tokens (yours, or a user's; operators: everyone's) with when each was last used, to the minute",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			user := ""
			if len(args) == 1 {
				user = args[0]
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListTokensResponse], error) {
				return c.Users.ListTokens(ctx, connect.NewRequest(&corpusv1.ListTokensRequest{User: user}))
			}, func(m *corpusv1.ListTokensResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "ID\tUSER\tCREATED\tEXPIRES\tLAST USED\tDESCRIPTION")
				for _, t := range m.Tokens {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Id, t.User, localTime(t.CreatedAt), localTime(t.ExpiresAt), lastUsed(t.LastUsedAt, t.LastUsedFrom), dash(t.Description))
				}
				return w.Flush()
			})
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a token: it stops working at once, open calls included",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.RevokeTokenResponse], error) {
				return c.Users.RevokeToken(ctx, connect.NewRequest(&corpusv1.RevokeTokenRequest{Id: args[0]}))
			}, func(*corpusv1.RevokeTokenResponse) error {
				fmt.Fprintf(g.stdout, "token %s revoked\n", args[0])
				return nil
			})
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

// lastUsed is when and from where a token or key was last used
// ("never"); it is recorded to the minute, so it may lag the last use
// that much.
func lastUsed(at *timestamppb.Timestamp, from string) string {
	if at == nil {
		return "never"
	}
	return localTime(at) + " from " + dash(from)
}

// newLoginCmd checks a token against a coordinator, or logs in with a
// directory password for one, and stores the address and token as an
// environment of the CLI config.
func newLoginCmd(g *Globals) *cobra.Command {
	var (
		name, ldapUser string
		passwordStdin  bool
		ttl            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "login (--token TOKEN | --ldap USER [--password-stdin]) [--address HOST:PORT] [--ca-cert FILE] [--as NAME]",
		Short: "Store an API token (given, or issued for your LDAP password) with the address and CA as a CLI environment",
		Example: `  corpus login --address 10.0.0.1:7400 --ca-cert ca.crt --token cusr_... --as prod
  corpus login --token cusr_...          # the current environment's address and CA
  corpus login --address 10.0.0.1:7400 --ca-cert ca.crt --ldap alice --as dev   # asks for the password
  pass show ldap/alice | corpus login --ldap alice --password-stdin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ldapUser != "" && cmd.Flags().Changed("token") {
				return fmt.Errorf("give --token or --ldap, not both")
			}
			if ldapUser == "" && g.Token == "" {
				return fmt.Errorf("--token or --ldap is required (an operator issues tokens with `corpus user token create USER`, or adds LDAP users with `corpus user add NAME --auth ldap`)")
			}
			e, err := g.Endpoint()
			if err != nil {
				return err
			}
			addr := e.Address
			if _, _, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(addr, "http://"), "https://")); err != nil {
				return fmt.Errorf("address %q: want host:port", addr)
			}
			if name, err = loginEnvName(g, name); err != nil {
				return err
			}
			token := g.Token
			if ldapUser != "" {
				// The password only ever travels over TLS to a
				// coordinator of the environment's CA.
				if strings.HasPrefix(addr, "http://") {
					return fmt.Errorf("refusing to send a password to %s: the API speaks TLS, give host:port", addr)
				}
				pw, err := readPassword(cmd, "LDAP password for "+ldapUser, passwordStdin)
				if err != nil {
					return err
				}
				anon, err := client.New(client.Environment{Address: addr, CACert: e.CACert}, false)
				if err != nil {
					return err
				}
				res, err := anon.Users.Login(cmd.Context(), connect.NewRequest(&corpusv1.LoginRequest{
					User: ldapUser, Password: pw, TtlSeconds: int64(ttl / time.Second)}))
				if err != nil {
					return fmt.Errorf("logging in as %s at %s: %w", ldapUser, addr, err)
				}
				token = res.Msg.Token
			}
			c, err := client.New(client.Environment{Address: addr, Token: token, CACert: e.CACert}, false)
			if err != nil {
				return err
			}
			st, err := c.Cluster.Status(cmd.Context(), connect.NewRequest(&corpusv1.StatusRequest{}))
			if err != nil {
				return fmt.Errorf("checking the token at %s: %w", addr, err)
			}
			if err := client.SaveEnvironment(g.ConfigFile, name, &client.Environment{Address: addr, Token: token, CACert: e.CACert}, true); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "logged in to cluster %s as %s; environment %s saved in %s and made current\n", st.Msg.ClusterId, st.Msg.Who, name, g.ConfigFile)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "as", "", "environment name to save it under (default: the current one)")
	f.StringVar(&ldapUser, "ldap", "", "log in as this user with their LDAP password (asked for, or read from stdin with --password-stdin)")
	f.BoolVar(&passwordStdin, "password-stdin", false, "read the password from the first line of stdin")
	f.DurationVar(&ttl, "ttl", 0, "how long the issued token works (default and most: the coordinator's --login-token-ttl)")
	return cmd
}

// loginEnvName is the environment a login is saved under: --as, else
// --env, else the current one, else "default".
func loginEnvName(g *Globals, name string) (string, error) {
	if name == "" {
		cfg, err := client.LoadConfig(g.ConfigFile)
		if err != nil {
			return "", err
		}
		name = g.Env
		if name == "" {
			name = cfg.Current
		}
		if name == "" {
			name = "default"
		}
	}
	return name, names.Validate("environment", name)
}

// maxPasswordLine bounds what --password-stdin reads.
const maxPasswordLine = 4 << 10

// readPassword reads a password: the first line of stdin with
// --password-stdin, else from the terminal without echo after prompt.
func readPassword(cmd *cobra.Command, prompt string, fromStdin bool) (string, error) {
	var pw string
	if fromStdin {
		b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxPasswordLine))
		if err != nil {
			return "", fmt.Errorf("reading the password from stdin: %w", err)
		}
		pw, _, _ = strings.Cut(string(b), "\n")
		pw = strings.TrimSuffix(pw, "\r")
	} else {
		fd := int(os.Stdin.Fd())
		if !term.IsTerminal(fd) {
			return "", fmt.Errorf("stdin is not a terminal: pass the password on stdin with --password-stdin")
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: ", prompt)
		b, err := term.ReadPassword(fd)
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return "", fmt.Errorf("reading the password: %w", err)
		}
		pw = string(b)
	}
	if pw == "" {
		return "", fmt.Errorf("the password is empty")
	}
	return pw, nil
}
