package cli

import (
	"fmt"
	"net"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"corpus/client"
	"corpus/internal/names"
	"corpus/internal/pki"
)

func newEnvCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "env", Short: "Manage named environments in the CLI config file"}
	var addr, token string
	var use bool
	add := &cobra.Command{
		Use:   "add NAME --address HOST:PORT [--token T] [--ca-cert FILE]",
		Short: "Add or replace an environment",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := names.Validate("environment", args[0]); err != nil {
				return err
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return fmt.Errorf("--address %q: want host:port", addr)
			}
			e := &client.Environment{Address: addr, Token: token}
			if g.CAFile != "" {
				b, err := os.ReadFile(g.CAFile)
				if err != nil {
					return fmt.Errorf("--ca-cert: %w", err)
				}
				if _, err := pki.ParseCert(b); err != nil {
					return fmt.Errorf("--ca-cert %s: %w", g.CAFile, err)
				}
				e.CACert = string(b)
			}
			return client.SaveEnvironment(g.ConfigFile, args[0], e, use)
		},
	}
	add.Flags().StringVar(&addr, "address", "", "coordinator API address host:port")
	add.Flags().StringVar(&token, "token", "", "API token")
	add.Flags().BoolVar(&use, "use", false, "also make it the current environment")

	useCmd := &cobra.Command{
		Use:   "use NAME",
		Short: "Choose the current environment",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := client.LoadConfig(g.ConfigFile)
			if err != nil {
				return err
			}
			if _, ok := cfg.Environments[args[0]]; !ok {
				return fmt.Errorf("environment %q is not in %s", args[0], g.ConfigFile)
			}
			cfg.Current = args[0]
			return cfg.Save(g.ConfigFile)
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List environments",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := client.LoadConfig(g.ConfigFile)
			if err != nil {
				return err
			}
			if g.json {
				type env struct {
					Name    string `json:"name"`
					Address string `json:"address"`
					Current bool   `json:"current"`
				}
				out := []env{}
				for _, n := range cfg.Names() {
					out = append(out, env{n, cfg.Environments[n].Address, n == cfg.Current})
				}
				return g.PrintJSONValue(out)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "CURRENT\tNAME\tADDRESS")
			for _, n := range cfg.Names() {
				mark := ""
				if n == cfg.Current {
					mark = "*"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\n", mark, n, cfg.Environments[n].Address)
			}
			return w.Flush()
		},
	}
	cmd.AddCommand(add, useCmd, list)
	return cmd
}
