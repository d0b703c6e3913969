package cli

import (
	"context"
	"fmt"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/internal/names"
	corpusv1 "corpus/proto/corpus/v1"
)

// newUserTokenCmd manages users' API tokens.
func newUserTokenCmd(g *globals) *cobra.Command {
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
			return call(g, cmd.Context(), func(ctx context.Context, c *clients) (*connect.Response[corpusv1.CreateTokenResponse], error) {
				return c.users.CreateToken(ctx, connect.NewRequest(&corpusv1.CreateTokenRequest{User: args[0], TtlSeconds: secs, Description: desc}))
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
		Short: "List tokens (yours, or a user's; operators: everyone's)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			user := ""
			if len(args) == 1 {
				user = args[0]
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *clients) (*connect.Response[corpusv1.ListTokensResponse], error) {
				return c.users.ListTokens(ctx, connect.NewRequest(&corpusv1.ListTokensRequest{User: user}))
			}, func(m *corpusv1.ListTokensResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "ID\tUSER\tCREATED\tEXPIRES\tDESCRIPTION")
				for _, t := range m.Tokens {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", t.Id, t.User, localTime(t.CreatedAt), localTime(t.ExpiresAt), dash(t.Description))
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
			return call(g, cmd.Context(), func(ctx context.Context, c *clients) (*connect.Response[corpusv1.RevokeTokenResponse], error) {
				return c.users.RevokeToken(ctx, connect.NewRequest(&corpusv1.RevokeTokenRequest{Id: args[0]}))
			}, func(*corpusv1.RevokeTokenResponse) error {
				fmt.Fprintf(g.stdout, "token %s revoked\n", args[0])
				return nil
			})
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

// newLoginCmd checks a token against a coordinator and stores both as an
// environment of the CLI config.
func newLoginCmd(g *globals) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "login --token TOKEN [--address HOST:PORT] [--ca-cert FILE] [--as NAME]",
		Short: "Check an API token and store it (with the address) as a CLI environment",
		Example: `  corpus login --address 10.0.0.1:7400 --ca-cert ca.crt --token cusr_... --as prod
  corpus login --token cusr_...          # the current environment's address`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g.token == "" {
				return fmt.Errorf("--token is required (an operator issues one with `corpus user token create USER`)")
			}
			e, err := g.endpoint()
			if err != nil {
				return err
			}
			addr := e.Address
			if _, _, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(addr, "http://"), "https://")); err != nil {
				return fmt.Errorf("address %q: want host:port", addr)
			}
			if name == "" {
				cfg, err := loadClientConfig(g.configPath)
				if err != nil {
					return err
				}
				name = g.env
				if name == "" {
					name = cfg.Current
				}
				if name == "" {
					name = "default"
				}
			}
			if err := names.Validate("environment", name); err != nil {
				return err
			}
			c, err := g.clients()
			if err != nil {
				return err
			}
			st, err := c.cluster.Status(cmd.Context(), connect.NewRequest(&corpusv1.StatusRequest{}))
			if err != nil {
				return fmt.Errorf("checking the token at %s: %w", addr, err)
			}
			if err := saveEnvironment(g.configPath, name, &Environment{Address: addr, Token: g.token, CACert: e.CACert}, true); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "logged in to cluster %s as %s; environment %s saved in %s and made current\n", st.Msg.ClusterId, st.Msg.Who, name, g.configPath)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "as", "", "environment name to save it under (default: the current one)")
	return cmd
}
