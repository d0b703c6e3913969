package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	corpusv1 "corpus/proto/corpus/v1"
)

func newUserCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "Add, list and delete the people who use the cluster (operators only)"}
	var role, authMethod string
	add := &cobra.Command{
		Use:   "add NAME [--role dev|ops|viewer] [--auth ldap]",
		Short: "Add a user; give them SSH keys with `corpus key add` and projects with `corpus project grant`",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.CreateUserResponse], error) {
				return c.Users.CreateUser(ctx, connect.NewRequest(&corpusv1.CreateUserRequest{Name: args[0], Role: role, Auth: authMethod}))
			}, func(msg *corpusv1.CreateUserResponse) error {
				verb := "added"
				if !msg.Created {
					verb = "already exists (same role), unchanged"
				}
				how := ""
				if msg.User.GetAuth() != "" {
					how = ", logs in with " + msg.User.GetAuth()
				}
				fmt.Fprintf(g.stdout, "user %s (%s%s) %s\n", msg.User.GetName(), msg.User.GetRole(), how, verb)
				return nil
			})
		},
	}
	add.Flags().StringVar(&role, "role", corpusv1.RoleDev, "dev (deploys granted projects), ops (everything) or viewer (reads granted projects)")
	add.Flags().StringVar(&authMethod, "auth", "", "ldap: the user may also log in with their directory password (corpus login --ldap NAME)")
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List users: role, number of SSH keys, when added, password login (ldap or -)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListUsersResponse], error) {
				return c.Users.ListUsers(ctx, connect.NewRequest(&corpusv1.ListUsersRequest{}))
			}, func(msg *corpusv1.ListUsersResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tROLE\tKEYS\tCREATED\tLOGIN")
				for _, u := range msg.Users {
					fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", u.Name, u.Role, len(u.Keys), localTime(u.CreatedAt), dash(u.Auth))
				}
				return w.Flush()
			})
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a user, their SSH keys and their project grants",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.DeleteUserResponse], error) {
				return c.Users.DeleteUser(ctx, connect.NewRequest(&corpusv1.DeleteUserRequest{Name: args[0]}))
			}, func(msg *corpusv1.DeleteUserResponse) error {
				fmt.Fprintf(g.stdout, "user %s deleted (with %d SSH keys)\n", args[0], len(msg.User.GetKeys()))
				return nil
			})
		},
	}
	cmd.AddCommand(add, list, del, newUserTokenCmd(g))
	return cmd
}

func newKeyCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "key", Short: "Add, list and delete users' SSH public keys (they push with them)"}
	add := &cobra.Command{
		Use:   "add USER FILE",
		Short: "Add a user's SSH public key from a .pub file, or from stdin with -",
		Example: `  corpus key add alice ~/.ssh/id_ed25519.pub
  ssh-add -L | head -1 | corpus key add alice -`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			line, err := readPublicKey(args[1], cmd.InOrStdin())
			if err != nil {
				return err
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.AddKeyResponse], error) {
				return c.Users.AddKey(ctx, connect.NewRequest(&corpusv1.AddKeyRequest{User: args[0], PublicKey: line}))
			}, func(msg *corpusv1.AddKeyResponse) error {
				k := msg.Key
				if !msg.Created {
					fmt.Fprintf(g.stdout, "key %s already belongs to user %s, unchanged\n", k.Fingerprint, args[0])
					return nil
				}
				fmt.Fprintf(g.stdout, "key %s (%s) added to user %s\n", k.Fingerprint, dash(k.Comment), args[0])
				return nil
			})
		},
	}
	list := &cobra.Command{
		Use:     "list [USER]",
		Aliases: []string{"ls"},
		Short:   "List SSH keys, of every user or of one",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListUsersResponse], error) {
				res, err := c.Users.ListUsers(ctx, connect.NewRequest(&corpusv1.ListUsersRequest{}))
				if err != nil || len(args) == 0 {
					return res, err
				}
				for _, u := range res.Msg.Users {
					if u.Name == args[0] {
						res.Msg.Users = []*corpusv1.User{u}
						return res, nil
					}
				}
				return nil, fmt.Errorf("user %q is not in the cluster (list them with `corpus user list`)", args[0])
			}, func(msg *corpusv1.ListUsersResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "USER\tFINGERPRINT\tCOMMENT\tADDED\tLAST USED")
				for _, u := range msg.Users {
					for _, k := range u.Keys {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", u.Name, k.Fingerprint, dash(k.Comment), localTime(k.AddedAt), lastUsed(k.LastUsedAt, k.LastUsedFrom))
					}
				}
				return w.Flush()
			})
		},
	}
	del := &cobra.Command{
		Use:   "delete USER FINGERPRINT",
		Short: "Delete one of a user's SSH keys (fingerprints: `corpus key list USER`)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.DeleteKeyResponse], error) {
				return c.Users.DeleteKey(ctx, connect.NewRequest(&corpusv1.DeleteKeyRequest{User: args[0], Fingerprint: args[1]}))
			}, func(*corpusv1.DeleteKeyResponse) error {
				fmt.Fprintf(g.stdout, "key %s deleted from user %s\n", args[1], args[0])
				return nil
			})
		},
	}
	cmd.AddCommand(add, list, del)
	return cmd
}

// maxKeyFile bounds what `key add` reads; a public key is one line of at
// most a few KiB.
const maxKeyFile = 64 << 10

// readPublicKey returns the first non-empty line of the public key file
// name, or of stdin when name is "-". It refuses a private key, which
// never leaves this machine, and points at the .pub file instead.
func readPublicKey(name string, stdin io.Reader) (string, error) {
	src, r := name, stdin
	if name == "-" {
		src = "stdin"
	} else {
		f, err := os.Open(name)
		if err != nil {
			return "", fmt.Errorf("reading public key: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxKeyFile+1))
	if err != nil {
		return "", fmt.Errorf("reading public key from %s: %w", src, err)
	}
	text := string(b)
	if strings.Contains(text, "PRIVATE KEY-----") || strings.HasPrefix(text, "PuTTY-User-Key-File-") {
		pub := "the .pub file (e.g. ~/.ssh/id_ed25519.pub)"
		if _, err := os.Stat(name + ".pub"); name != "-" && err == nil {
			pub = name + ".pub"
		}
		return "", fmt.Errorf("%s holds a private key, which never leaves this machine: give %s instead", src, pub)
	}
	if len(b) > maxKeyFile {
		return "", fmt.Errorf("%s is over %d KiB: a public key is one short line (give the .pub file)", src, maxKeyFile>>10)
	}
	for _, line := range strings.Split(text, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line, nil
		}
	}
	return "", fmt.Errorf("%s is empty: give a public key file (e.g. ~/.ssh/id_ed25519.pub)", src)
}
