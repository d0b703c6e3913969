package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	"corpus/internal/units"
	corpusv1 "corpus/proto/corpus/v1"
)

func newNodeCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Enroll and inspect compute nodes"}
	var ttl time.Duration
	var node string
	token := &cobra.Command{
		Use:   "token [--node NODE]",
		Short: "Create a one-time join token for enrolling a node (or, with --node, for an enrolled node to rejoin)",
		Long: `Create a one-time join token for enrolling a node.

With --node, the token is for that enrolled node alone to rejoin: its agent,
started with it, trades it for a new certificate when its own cannot serve
(it expired while the node was off, or is of a cluster CA rotated out while
the node was away). The node keeps its id, subnet and guests; its former
certificate is no longer accepted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.CreateJoinTokenResponse], error) {
				return c.Nodes.CreateJoinToken(ctx, connect.NewRequest(&corpusv1.CreateJoinTokenRequest{TtlSeconds: int64(ttl / time.Second), Node: node}))
			}, func(msg *corpusv1.CreateJoinTokenResponse) error {
				fmt.Fprintln(g.stdout, msg.Token)
				what := "enroll with"
				if node != "" {
					what = "for node " + node + " to rejoin; restart its agent with"
				}
				fmt.Fprintf(g.stderr, "valid once, until %s; %s: corpus agent --coordinator ADDR --join-token %s\n",
					msg.Info.ExpiresAt.AsTime().Local().Format(time.RFC3339), what, msg.Token)
				return nil
			})
		},
	}
	token.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token stays valid")
	token.Flags().StringVar(&node, "node", "", "make a rejoin token for this enrolled node (name or id)")

	var yes bool
	remove := &cobra.Command{
		Use:   "remove NODE [--yes]",
		Short: "Forget an empty node: its credential stops working at once (drain it first; asks first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.confirm(cmd, yes, "Remove node "+args[0]+" from the cluster (its agent's credential stops working)"); err != nil {
				return err
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.RemoveNodeResponse], error) {
				return c.Nodes.RemoveNode(ctx, connect.NewRequest(&corpusv1.RemoveNodeRequest{Name: args[0]}))
			}, func(m *corpusv1.RemoveNodeResponse) error {
				fmt.Fprintf(g.stdout, "node %s removed; its agent can no longer reach the cluster (enroll the host again with a new join token)\n", m.Node.GetName())
				return nil
			})
		},
	}
	addYes(remove, &yes)
	cmd.AddCommand(token, newNodeListCmd(g, "list"), newNodeShowCmd(g, "show"), newNodeModeCmd(g, "mode"), remove)
	return cmd
}

func newNodeListCmd(g *Globals, use string) *cobra.Command {
	return &cobra.Command{
		Use:     use,
		Aliases: aliases(use, "ls"),
		Short:   "List nodes",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListNodesResponse], error) {
				return c.Nodes.ListNodes(ctx, connect.NewRequest(&corpusv1.ListNodesRequest{}))
			}, func(msg *corpusv1.ListNodesResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tSTATUS\tMODE\tGUESTS\tMEMORY\tCPUS\tDRIVERS\tVERSION\tLABELS")
				for _, v := range msg.Nodes {
					n := v.Node
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s/%s\t%s/%s\t%s\t%s\t%s\n", n.Name, n.Status, nodeMode(n), v.Guests,
						units.FormatSize(v.Allocated.GetMemoryBytes()), units.FormatSize(n.Capacity.GetMemoryBytes()),
						units.FormatCPUs(v.Allocated.GetCpuMillis()), units.FormatCPUs(n.Capacity.GetCpuMillis()),
						driverList(n.Drivers), dash(n.AgentVersion), labelList(n.Labels))
				}
				return w.Flush()
			})
		},
	}
}

func newNodeShowCmd(g *Globals, use string) *cobra.Command {
	return &cobra.Command{
		Use:   use + " NODE",
		Short: "Show one node",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.GetNodeResponse], error) {
				return c.Nodes.GetNode(ctx, connect.NewRequest(&corpusv1.GetNodeRequest{Name: args[0]}))
			}, func(msg *corpusv1.GetNodeResponse) error {
				v := msg.Node
				n := v.Node
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "Name:\t%s\n", n.Name)
				fmt.Fprintf(w, "ID:\t%s\n", n.Id)
				fmt.Fprintf(w, "Status:\t%s\n", n.Status)
				fmt.Fprintf(w, "Mode:\t%s\n", nodeMode(n))
				fmt.Fprintf(w, "Labels:\t%s\n", labelList(n.Labels))
				fmt.Fprintf(w, "Agent:\t%s (version %s)\n", n.AgentAddress, n.AgentVersion)
				fmt.Fprintf(w, "Enrolled:\t%s\n", n.EnrolledAt.AsTime().Local().Format(time.RFC3339))
				if n.CertSerial != "" {
					fmt.Fprintf(w, "Cert:\tserial %s, expires %s\n", n.CertSerial, n.CertExpiresAt.AsTime().Local().Format(time.RFC3339))
				}
				fmt.Fprintf(w, "Guests:\t%d\n", v.Guests)
				if len(n.Orphans) > 0 {
					var names []string
					for _, o := range n.Orphans {
						names = append(names, o.Name)
					}
					fmt.Fprintf(w, "Orphans:\t%s (running, unknown to the cluster: see corpus guest list --orphans)\n", strings.Join(names, ", "))
				}
				fmt.Fprintf(w, "Memory:\t%s allocated of %s\n", units.FormatSize(v.Allocated.GetMemoryBytes()), units.FormatSize(n.Capacity.GetMemoryBytes()))
				fmt.Fprintf(w, "CPUs:\t%s allocated of %s\n", units.FormatCPUs(v.Allocated.GetCpuMillis()), units.FormatCPUs(n.Capacity.GetCpuMillis()))
				fmt.Fprintf(w, "Disk:\t%s allocated of %s\n", units.FormatSize(v.Allocated.GetDiskBytes()), units.FormatSize(n.Capacity.GetDiskBytes()))
				fmt.Fprintln(w, "Drivers:")
				for _, d := range n.Drivers {
					health := "healthy"
					if !d.Healthy {
						health = "unhealthy: " + d.Detail
					}
					fmt.Fprintf(w, "  %s\t%s\timages: %s\t%s\n", d.Name, health, strings.Join(d.Images, ", "), labelList(d.Attributes))
				}
				return w.Flush()
			})
		},
	}
}

// aliases are a command's aliases under its own name, none under a
// seed alias's.
func aliases(use string, names ...string) []string {
	if strings.HasPrefix(use, "computenode_") {
		return nil
	}
	return names
}

// nodeMode is a node's mode as the CLI shows it: "prod", "drain",
// "prod,ineligible".
func nodeMode(n *corpusv1.Node) string {
	if n.Ineligible {
		return n.Mode + "," + corpusv1.Ineligible
	}
	return n.Mode
}

func driverList(ds []*corpusv1.DriverInfo) string {
	var out []string
	for _, d := range ds {
		s := d.Name
		if !d.Healthy {
			s += "(unhealthy)"
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

func labelList(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}
