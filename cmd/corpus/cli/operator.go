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

// newOperatorCmd groups operations on the control plane itself.
func newOperatorCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "operator", Short: "Operate the control plane (the coordinators' Raft group)"}
	raftCmd := &cobra.Command{Use: "raft", Short: "Inspect and change the coordinators' Raft group"}
	list := &cobra.Command{
		Use:   "list-peers",
		Short: "List the replicas of the Raft group",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.RaftPeersResponse], error) {
				return c.Cluster.RaftPeers(ctx, connect.NewRequest(&corpusv1.RaftPeersRequest{}))
			}, func(m *corpusv1.RaftPeersResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "ID\tRAFT ADDRESS\tAPI ADDRESS\tSTATE\tVOTER\tVERSION\tSERVER VERSION")
				for _, p := range m.Peers {
					st := "follower"
					if p.Leader {
						st = "leader"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%t\t%s\t%s\n", p.Id, p.RaftAddress, dash(p.ApiAddress), st, p.Voter, dash(p.Version), dash(p.ServerVersion))
				}
				return w.Flush()
			})
		},
	}
	var id, raftAddr, apiAddr string
	add := &cobra.Command{
		Use:   "add-peer --id ID --raft-address HOST:PORT --api-address HOST:PORT",
		Short: "Add a replica (started without --bootstrap) to the group as a voter",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.AddRaftPeerResponse], error) {
				return c.Cluster.AddRaftPeer(ctx, connect.NewRequest(&corpusv1.AddRaftPeerRequest{Id: id, RaftAddress: raftAddr, ApiAddress: apiAddr}))
			}, func(*corpusv1.AddRaftPeerResponse) error {
				fmt.Fprintf(g.stdout, "replica %s added at %s; it catches up from the leader\n", id, raftAddr)
				return nil
			})
		},
	}
	add.Flags().StringVar(&id, "id", "", "the new replica's id (its --id)")
	add.Flags().StringVar(&raftAddr, "raft-address", "", "the new replica's Raft address (its --raft-addr)")
	add.Flags().StringVar(&apiAddr, "api-address", "", "the new replica's API address")
	remove := &cobra.Command{
		Use:   "remove-peer ID",
		Short: "Remove a replica (a dead one, say) from the group",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.RemoveRaftPeerResponse], error) {
				return c.Cluster.RemoveRaftPeer(ctx, connect.NewRequest(&corpusv1.RemoveRaftPeerRequest{Id: args[0]}))
			}, func(*corpusv1.RemoveRaftPeerResponse) error {
				fmt.Fprintf(g.stdout, "replica %s removed from the group\n", args[0])
				return nil
			})
		},
	}
	raftCmd.AddCommand(list, add, remove)
	keyring := &cobra.Command{Use: "keyring", Short: "The cluster's keys for sealed values (config, secrets)"}
	rotate := &cobra.Command{
		Use:   "rotate",
		Short: "Make a new key the only one: every sealed value is sealed again with it, in one replicated write",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.RotateKeyringResponse], error) {
				return c.Cluster.RotateKeyring(ctx, connect.NewRequest(&corpusv1.RotateKeyringRequest{}))
			}, func(m *corpusv1.RotateKeyringResponse) error {
				if m.Previous == "" {
					fmt.Fprintf(g.stdout, "keyring created: key %s\n", m.Primary)
					return nil
				}
				fmt.Fprintf(g.stdout, "key %s replaced %s; %d values sealed again\n", m.Primary, m.Previous, m.Resealed)
				return nil
			})
		},
	}
	keyring.AddCommand(rotate)
	cmd.AddCommand(raftCmd, keyring, newSnapshotCmd(g), newCACmd(g))
	return cmd
}
