package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	corpusv1 "corpus/proto/corpus/v1"
)

func newVolumeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "volume", Short: "Show and delete guests' persistent volumes"}
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List volumes: size, used, free, node, bound guest",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *clients) (*connect.Response[corpusv1.ListVolumesResponse], error) {
				return c.volumes.ListVolumes(ctx, connect.NewRequest(&corpusv1.ListVolumesRequest{}))
			}, func(msg *corpusv1.ListVolumesResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tSIZE\tUSED\tFREE\tNODE\tGUEST\tSTATE")
				for _, v := range msg.Volumes {
					printVolumeRow(w, v)
				}
				return w.Flush()
			})
		},
	}
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show one volume",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *clients) (*connect.Response[corpusv1.GetVolumeResponse], error) {
				return c.volumes.GetVolume(ctx, connect.NewRequest(&corpusv1.GetVolumeRequest{Name: args[0]}))
			}, func(msg *corpusv1.GetVolumeResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tSIZE\tUSED\tFREE\tNODE\tGUEST\tSTATE")
				printVolumeRow(w, msg.Volume)
				if m := msg.Volume.Volume.GetObserved().GetMessage(); m != "" {
					fmt.Fprintf(w, "\nmessage: %s\n", m)
				}
				return w.Flush()
			})
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete an unbound volume and its data",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *clients) (*connect.Response[corpusv1.DeleteVolumeResponse], error) {
				return c.volumes.DeleteVolume(ctx, connect.NewRequest(&corpusv1.DeleteVolumeRequest{Name: args[0]}))
			}, func(msg *corpusv1.DeleteVolumeResponse) error {
				fmt.Fprintf(g.stdout, "volume %s: deletion requested\n", args[0])
				return nil
			})
		},
	}
	cmd.AddCommand(list, show, del)
	return cmd
}

func printVolumeRow(w *tabwriter.Writer, vv *corpusv1.VolumeView) {
	v := vv.Volume
	o := v.GetObserved()
	state := o.GetState()
	if v.DesiredState == "deleted" {
		state = "deleting"
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, formatSize(v.SizeBytes), formatSize(o.GetUsedBytes()),
		formatSize(o.GetFreeBytes()), dash(vv.NodeName), dash(v.GuestName), dash(state))
}
