package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	"corpus/internal/units"
	corpusv1 "corpus/proto/corpus/v1"
)

func newVolumeCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "volume", Short: "Show, move, back up and delete guests' persistent volumes"}
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List volumes: size, used, free, node, bound guest",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListVolumesResponse], error) {
				return c.Volumes.ListVolumes(ctx, connect.NewRequest(&corpusv1.ListVolumesRequest{}))
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
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.GetVolumeResponse], error) {
				return c.Volumes.GetVolume(ctx, connect.NewRequest(&corpusv1.GetVolumeRequest{Name: args[0]}))
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
	var yes bool
	del := &cobra.Command{
		Use:   "delete NAME [--yes]",
		Short: "Delete an unbound volume and its data (asks first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.confirm(cmd, yes, "Delete volume "+args[0]+" and its data"); err != nil {
				return err
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.DeleteVolumeResponse], error) {
				return c.Volumes.DeleteVolume(ctx, connect.NewRequest(&corpusv1.DeleteVolumeRequest{Name: args[0]}))
			}, func(msg *corpusv1.DeleteVolumeResponse) error {
				fmt.Fprintf(g.stdout, "volume %s: deletion requested\n", args[0])
				return nil
			})
		},
	}
	addYes(del, &yes)
	var to string
	move := &cobra.Command{
		Use:   "move NAME --to NODE",
		Short: "Copy an unbound volume to another node, with progress; the old copy is removed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return fmt.Errorf("--to: name the node to move volume %s to", args[0])
			}
			c, err := g.Clients()
			if err != nil {
				return err
			}
			stream, err := c.Volumes.MoveVolume(cmd.Context(), connect.NewRequest(&corpusv1.MoveVolumeRequest{Name: args[0], ToNode: to}))
			if err != nil {
				return err
			}
			defer stream.Close()
			for stream.Receive() {
				p := stream.Msg()
				if p.Finished {
					if g.json {
						return g.printJSON(p)
					}
					fmt.Fprintf(g.stdout, "volume %s moved to node %s (%s copied)\n", args[0], to, units.FormatSize(p.DoneBytes))
					return nil
				}
				if !g.json && p.TotalBytes > 0 {
					fmt.Fprintf(g.stderr, "  %s  %s of %s (%d%%)\n", time.Now().Format("15:04:05"), units.FormatSize(p.DoneBytes), units.FormatSize(p.TotalBytes), p.DoneBytes*100/p.TotalBytes)
				}
			}
			if err := stream.Err(); err != nil {
				return err
			}
			return fmt.Errorf("the move of volume %s ended without finishing; see `corpus volume show %s`", args[0], args[0])
		},
	}
	move.Flags().StringVar(&to, "to", "", "node to move the volume to")
	snapshot := &cobra.Command{
		Use:   "snapshot NAME",
		Short: "Copy a volume to an image file on its node, without stopping its guest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.SnapshotVolumeResponse], error) {
				return c.Volumes.SnapshotVolume(ctx, connect.NewRequest(&corpusv1.SnapshotVolumeRequest{Name: args[0]}))
			}, func(msg *corpusv1.SnapshotVolumeResponse) error {
				fmt.Fprintf(g.stdout, "%s:%s (%s)\n", msg.NodeName, msg.Path, units.FormatSize(msg.SizeBytes))
				return nil
			})
		},
	}
	cmd.AddCommand(list, show, del, move, snapshot, newVolumeResizeCmd(g, "enlarge"), newVolumeResizeCmd(g, "trim"))
	cmd.AddCommand(newVolumeBackupCmds(g)...)
	return cmd
}

// newVolumeResizeCmd makes `volume enlarge` (grow; online when the node
// can, else with the guest briefly stopped) and `volume trim` (shrink,
// with the guest briefly stopped; refused when the data would not fit).
func newVolumeResizeCmd(g *Globals, verb string) *cobra.Command {
	var timeout time.Duration
	short := "Grow a volume: +2G or a new absolute size; the guest sees the new size"
	if verb == "trim" {
		short = "Shrink a volume: -1G or a new absolute size; refused when the data would not fit"
	}
	cmd := &cobra.Command{
		Use:   verb + " NAME SIZE",
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &corpusv1.ResizeVolumeRequest{Name: args[0], AllowShrink: verb == "trim"}
			arg := args[1]
			sign := int64(0)
			switch {
			case strings.HasPrefix(arg, "+"):
				sign, arg = 1, arg[1:]
			case strings.HasPrefix(arg, "-"):
				sign, arg = -1, arg[1:]
			}
			n, err := units.ParseSize(arg)
			if err != nil {
				return fmt.Errorf("size: %w", err)
			}
			switch {
			case sign == 0:
				req.SizeBytes = n
			case verb == "enlarge" && sign < 0, verb == "trim" && sign > 0:
				return fmt.Errorf("`volume %s` takes %s; use `volume %s` for the other way", verb, map[string]string{"enlarge": "+SIZE", "trim": "-SIZE"}[verb], map[string]string{"enlarge": "trim", "trim": "enlarge"}[verb])
			default:
				req.DeltaBytes = sign * n
			}
			c, err := g.Clients()
			if err != nil {
				return err
			}
			before, err := c.Volumes.GetVolume(cmd.Context(), connect.NewRequest(&corpusv1.GetVolumeRequest{Name: args[0]}))
			if err != nil {
				return err
			}
			if req.SizeBytes != 0 {
				cur := before.Msg.Volume.Volume.SizeBytes
				if verb == "enlarge" && req.SizeBytes < cur || verb == "trim" && req.SizeBytes > cur {
					return fmt.Errorf("volume %s is %s; `volume %s` cannot make it %s", args[0], units.FormatSize(cur), verb, units.FormatSize(req.SizeBytes))
				}
			}
			res, err := c.Volumes.ResizeVolume(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			return g.waitVolume(cmd.Context(), c, res.Msg.Volume, timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the node")
	// "-1G" after NAME is the size, not a flag: flags go before NAME.
	cmd.Flags().SetInterspersed(false)
	return cmd
}

// waitVolume follows a volume until its node reports the desired size.
func (g *Globals) waitVolume(ctx context.Context, c *client.Clients, want *corpusv1.Volume, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		res, err := c.Volumes.GetVolume(ctx, connect.NewRequest(&corpusv1.GetVolumeRequest{Name: want.Name}))
		if err != nil {
			if pastDeadline(ctx) {
				return fmt.Errorf("timed out after %s waiting for volume %s (see `corpus volume show %s`)", timeout, want.Name, want.Name)
			}
			return err
		}
		v := res.Msg.Volume.Volume
		o := v.GetObserved()
		line := fmt.Sprintf("%s: %s of %s", o.GetState(), units.FormatSize(o.GetSizeBytes()), units.FormatSize(v.SizeBytes))
		if o.GetMessage() != "" {
			line += ": " + o.GetMessage()
		}
		if line != last && !g.json {
			fmt.Fprintf(g.stderr, "  %s  %s\n", time.Now().Format("15:04:05"), line)
			last = line
		}
		switch {
		case o.GetState() == corpusv1.VolumeReady && o.GetSizeBytes() == v.SizeBytes:
			if g.json {
				return g.printJSON(res.Msg)
			}
			fmt.Fprintf(g.stdout, "volume %s is %s (%s used, %s free)\n", v.Name, units.FormatSize(v.SizeBytes), units.FormatSize(o.GetUsedBytes()), units.FormatSize(o.GetFreeBytes()))
			return nil
		case o.GetState() == "failed", o.GetRefusedSizeBytes() == v.SizeBytes:
			// The node refused the size (its data would not fit): it
			// keeps the volume as it is and tries that size again only
			// once the data shrinks.
			return fmt.Errorf("volume %s: %s", v.Name, o.GetMessage())
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// printVolumeRow prints a volume at the size its node has; while that
// is not the desired size, STATE says so.
func printVolumeRow(w *tabwriter.Writer, vv *corpusv1.VolumeView) {
	v := vv.Volume
	o := v.GetObserved()
	size, state := v.SizeBytes, o.GetState()
	if state == corpusv1.VolumeReady && o.GetSizeBytes() != 0 && o.GetSizeBytes() != v.SizeBytes {
		size, state = o.GetSizeBytes(), "resizing to "+units.FormatSize(v.SizeBytes)
		if o.GetRefusedSizeBytes() == v.SizeBytes {
			state = "not resized to " + units.FormatSize(v.SizeBytes)
		}
	}
	if v.DesiredState == corpusv1.VolumeDeleted {
		state = "deleting"
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, units.FormatSize(size), units.FormatSize(o.GetUsedBytes()),
		units.FormatSize(o.GetFreeBytes()), dash(vv.NodeName), dash(v.GuestName), dash(state))
}
