package cli

import (
	"fmt"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	corpusv1 "corpus/proto/corpus/v1"
)

func newStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's status as the chosen coordinator sees it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.clients()
			if err != nil {
				return err
			}
			res, err := c.cluster.Status(cmd.Context(), connect.NewRequest(&corpusv1.StatusRequest{}))
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res.Msg)
			}
			m := res.Msg
			fmt.Fprintf(g.stdout, "cluster %s: leader %s, index %d, %d nodes, %d guests (coordinator %s; you are %s)\n",
				m.ClusterId, m.Leader, m.Index, m.Nodes, m.Guests, m.Version, m.Who)
			return nil
		},
	}
}
