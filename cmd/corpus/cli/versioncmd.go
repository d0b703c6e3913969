package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"corpus/internal/version"
)

// newVersionCmd prints what this binary was built from; --version on the
// root prints the same line.
func newVersionCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			info := version.Get()
			if g.json {
				return g.PrintJSONValue(info)
			}
			_, err := fmt.Fprintln(g.stdout, info)
			return err
		},
	}
}
