package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"corpus/cmd/corpus/cli"
	"corpus/internal/atomicfile"
	"corpus/internal/pki"
)

// newTLSCmd manages the cluster CA's files. A replica bootstrapping alone
// creates its CA itself; a group's replicas share one made here.
func newTLSCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "tls", Short: "Cluster certificate authority files"}
	var dir, name string
	create := &cobra.Command{
		Use:   "ca-create --dir DIR",
		Short: "Create a cluster CA (ca.crt, ca.key) for a group of coordinators",
		Example: `  corpus tls ca-create --dir /etc/corpus/ca
  corpus coordinator --id c1 --bootstrap-expect 3 --join ... --cluster-ca /etc/corpus/ca/ca.crt --cluster-ca-key /etc/corpus/ca/ca.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return errors.New("--dir is required")
			}
			certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
			for _, p := range []string{certPath, keyPath} {
				if _, err := os.Stat(p); err == nil {
					return fmt.Errorf("%s exists: a cluster's CA is made once (remove it first to start over)", p)
				}
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			certPEM, keyPEM, err := pki.NewCA(name)
			if err != nil {
				return err
			}
			if err := atomicfile.Write(keyPath, keyPEM, 0o600); err != nil {
				return err
			}
			if err := atomicfile.Write(certPath, certPEM, 0o644); err != nil {
				return err
			}
			ca, err := pki.LoadCA(certPEM, keyPEM)
			if err != nil {
				return err
			}
			if g.JSON() {
				return g.PrintJSONValue(map[string]string{"cert": certPath, "key": keyPath, "pin": ca.Pin()})
			}
			fmt.Fprintf(g.Stdout(), "created %s and %s (pin %s); give both to every replica with --cluster-ca and --cluster-ca-key, keep the key secret\n", certPath, keyPath, ca.Pin())
			return nil
		},
	}
	create.Flags().StringVar(&dir, "dir", "", "folder to write ca.crt and ca.key to")
	create.Flags().StringVar(&name, "name", "corpus", "name in the CA's subject")
	cmd.AddCommand(create)
	return cmd
}
