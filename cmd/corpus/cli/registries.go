package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	corpusv1 "corpus/proto/corpus/v1"
)

func newRegistryCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "Manage the credentials nodes pull OCI images from private registries with",
		Long: `A registry's credentials serve every guest and project that pulls an image
from it (corpus guest create --image, corpus deploy --image). The password
or token is sealed with the cluster keyring and never shown again; a node
gets it from a coordinator at each pull, for the registries of its own
guests, and keeps it nowhere. There is no --password flag: a password in
argv is seen by every user of the host (ps) and kept in shell histories.`,
	}
	var (
		username      string
		passwordStdin bool
	)
	login := &cobra.Command{
		Use:   "login HOST --username USER [--password-stdin]",
		Short: "Set a registry's credentials (asks for the password, or reads it from stdin)",
		Example: `  corpus registry login registry.example.com --username ci   # asks for the password
  pass show registry/ci | corpus registry login registry.example.com:5000 -u ci --password-stdin
  corpus registry login docker.io -u alice --password-stdin < token.txt`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if username == "" {
				return fmt.Errorf("--username is required (registries that take a token alone take any name with it)")
			}
			pw, err := readPassword(cmd, "Password for "+username+" at "+args[0], passwordStdin)
			if err != nil {
				return err
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.RegistryLoginResponse], error) {
				return c.Registries.Login(ctx, connect.NewRequest(&corpusv1.RegistryLoginRequest{Host: args[0], Username: username, Password: pw}))
			}, func(msg *corpusv1.RegistryLoginResponse) error {
				if !msg.Changed {
					_, err := fmt.Fprintf(g.stdout, "registry %s: %s's credentials were set already; nothing changed\n", msg.Registry.Host, msg.Registry.Username)
					return err
				}
				_, err := fmt.Fprintf(g.stdout, "registry %s: credentials of %s set; nodes use them from their next pull\n", msg.Registry.Host, msg.Registry.Username)
				return err
			})
		},
	}
	login.Flags().StringVarP(&username, "username", "u", "", "user name at the registry")
	login.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the password or token from the first line of stdin")

	list := &cobra.Command{
		Use:   "list",
		Short: "List the registries with credentials: host, user, when set and by whom (never the password)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListRegistriesResponse], error) {
				return c.Registries.ListRegistries(ctx, connect.NewRequest(&corpusv1.ListRegistriesRequest{}))
			}, func(msg *corpusv1.ListRegistriesResponse) error {
				if len(msg.Registries) == 0 {
					_, err := fmt.Fprintln(g.stdout, "no registry has credentials (corpus registry login HOST sets them)")
					return err
				}
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "HOST\tUSER\tSET\tBY")
				for _, r := range msg.Registries {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Host, r.Username, localTime(r.SetAt), r.SetBy)
				}
				return w.Flush()
			})
		},
	}
	logout := &cobra.Command{
		Use:   "logout HOST",
		Short: "Remove a registry's credentials (a registry without any is no error)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.RegistryLogoutResponse], error) {
				return c.Registries.Logout(ctx, connect.NewRequest(&corpusv1.RegistryLogoutRequest{Host: args[0]}))
			}, func(msg *corpusv1.RegistryLogoutResponse) error {
				if !msg.Removed {
					_, err := fmt.Fprintf(g.stdout, "registry %s had no credentials; nothing changed\n", msg.Host)
					return err
				}
				_, err := fmt.Fprintf(g.stdout, "registry %s: credentials removed; nodes pull from it anonymously from now on\n", msg.Host)
				return err
			})
		},
	}
	cmd.AddCommand(login, list, logout)
	return cmd
}
