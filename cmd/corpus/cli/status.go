package cli

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	corpusv1 "corpus/proto/corpus/v1"
)

func newStatusCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's status as the chosen coordinator sees it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.StatusResponse], error) {
				return c.Cluster.Status(ctx, connect.NewRequest(&corpusv1.StatusRequest{}))
			}, func(msg *corpusv1.StatusResponse) error {
				m := msg
				leader := m.Leader
				if m.LeaderApi != "" {
					leader += " (api " + m.LeaderApi + ")"
				}
				fmt.Fprintf(g.stdout, "cluster %s: leader %s, index %d, %d nodes, %d guests (answered by %s, coordinator %s; you are %s)\n",
					m.ClusterId, leader, m.Index, m.Nodes, m.Guests, dash(m.Replica), m.Version, m.Who)
				fmt.Fprintf(g.stdout, "cluster version %s (what every replica can apply; it moves once every voter runs a newer release)\n", dash(m.ClusterVersion))
				for _, p := range m.Replicas {
					role := "follower"
					if p.Leader {
						role = "leader"
					} else if !p.Voter {
						role = "non-voter"
					}
					fmt.Fprintf(g.stdout, "  replica %s (%s): corpus %s, server version %s\n", p.Id, role, dash(p.Version), dash(p.ServerVersion))
				}
				return nil
			})
		},
	}
}
