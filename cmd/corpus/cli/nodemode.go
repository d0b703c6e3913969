package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	corpusv1 "corpus/proto/corpus/v1"
)

func newNodeModeCmd(g *Globals, use string) *cobra.Command {
	var (
		deadline time.Duration
		detach   bool
	)
	cmd := &cobra.Command{
		Use:   use + " NODE dev|staging|prod|drain|eligible|ineligible",
		Short: "Set the environments a node takes, drain it, or stop new placements on it",
		Long: `mode sets what a node takes:

  dev, staging, prod    the project environments the node takes (other
                        guests go to any node that is not draining)
  drain                 take nothing new, and move the node's guests away:
                        each stateless guest's new copy is started on
                        another node before the old one stops; guests with
                        a volume stay and are listed for a volume move
  eligible, ineligible  whether the node takes new guests at all; the ones
                        it runs stay

drain follows the moves until the node is empty or --deadline passes, and
then says what is left; the drain itself goes on. Setting a mode again
(dev, staging or prod) ends it.`,
		Example: `  corpus node mode n1 prod
  corpus node mode n1 drain --deadline 5m
  corpus node mode n1 ineligible`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, mode := args[0], args[1]
			c, err := g.Clients()
			if err != nil {
				return err
			}
			res, err := c.Nodes.SetNodeMode(cmd.Context(), connect.NewRequest(&corpusv1.SetNodeModeRequest{Name: name, Mode: mode}))
			if err != nil {
				return err
			}
			if mode != corpusv1.ModeDrain || detach {
				if g.json {
					return g.printJSON(res.Msg)
				}
				verb := "is now"
				if !res.Msg.Changed {
					verb = "already was"
				}
				fmt.Fprintf(g.stdout, "node %s %s in mode %s\n", name, verb, nodeMode(res.Msg.Node.Node))
				return nil
			}
			return g.followDrain(cmd.Context(), c, name, deadline)
		},
	}
	cmd.Flags().DurationVar(&deadline, "deadline", 5*time.Minute, "with drain: how long to follow the moves before saying what is left")
	cmd.Flags().BoolVar(&detach, "detach", false, "with drain: return once the drain has started")
	return cmd
}

// followDrain prints the moves off a draining node as they happen until
// nothing that can move is left, or until deadline, and then what stays.
func (g *Globals) followDrain(ctx context.Context, c *client.Clients, name string, deadline time.Duration) error {
	dctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	var (
		last  *corpusv1.DrainStatusResponse
		index uint64
		shown = map[string]string{} // the line last printed for each guest
		to    = map[string]string{} // where moving guests go
	)
	for {
		res, err := c.Nodes.DrainStatus(dctx, connect.NewRequest(&corpusv1.DrainStatusRequest{Name: name, MinIndex: index, WaitSeconds: 30}))
		if err != nil {
			if pastDeadline(dctx) && ctx.Err() == nil {
				break // the deadline: say what is left
			}
			return err
		}
		last, index = res.Msg, res.Msg.Index
		if m := last.Node.GetNode().GetMode(); m != corpusv1.ModeDrain {
			return fmt.Errorf("node %s is no longer draining (its mode is now %s)", name, m)
		}
		present := map[string]bool{}
		for _, dg := range last.Guests {
			present[dg.Name] = true
			if dg.ToNode != "" {
				to[dg.Name] = dg.ToNode
			}
			if line := drainLine(dg); line != shown[dg.Name] {
				g.progress("%s: %s", dg.Name, line)
				shown[dg.Name] = line
			}
		}
		for guest := range shown {
			if !present[guest] {
				if dest := to[guest]; dest != "" {
					g.progress("%s: moved to %s", guest, dest)
				} else {
					g.progress("%s: gone", guest)
				}
				delete(shown, guest)
			}
		}
		if last.Done {
			break
		}
	}
	if last == nil {
		return fmt.Errorf("the deadline of %s passed before node %s answered", deadline, name)
	}
	if g.json {
		if err := g.printJSON(last); err != nil {
			return err
		}
	}
	switch {
	case last.Empty:
		if !g.json {
			fmt.Fprintf(g.stdout, "node %s is drained: nothing is left on it\n", name)
		}
		return nil
	case last.Done:
		if !g.json {
			fmt.Fprintf(g.stdout, "node %s is drained but for guests whose data is on it:\n", name)
			for _, dg := range last.Guests {
				fmt.Fprintf(g.stdout, "  %s: volume %s; delete the guest (its volume stays), then `corpus volume move %s --to NODE` and create it again with --use-volume %s\n",
					dg.Name, dg.Volume, dg.Volume, dg.Volume)
			}
		}
		return fmt.Errorf("node %s still holds %d guests with a volume", name, len(last.Guests))
	}
	if !g.json {
		fmt.Fprintf(g.stdout, "deadline of %s passed; still on node %s:\n", deadline, name)
		for _, dg := range last.Guests {
			fmt.Fprintf(g.stdout, "  %s: %s\n", dg.Name, drainLine(dg))
		}
	}
	return fmt.Errorf("node %s is not drained after %s (%d guests left); the drain goes on: run `corpus node mode %s drain` to follow it again",
		name, deadline, len(last.Guests), name)
}

// drainLine says where one guest of a draining node is.
func drainLine(dg *corpusv1.DrainGuest) string {
	switch dg.State {
	case "moving":
		return "moving to " + dg.ToNode + " (new copy " + dg.Status + "; the old one runs until it does)"
	case "waiting":
		if dg.Reason != "" {
			return "waiting for a node: " + dg.Reason
		}
		return "waiting for a node"
	case "needs-volume-move":
		return "stays: its volume " + dg.Volume + " is on this node (needs `corpus volume move`)"
	case "deleting":
		return "being deleted"
	}
	return strings.TrimSpace(dg.State + " " + dg.Status)
}

// progress prints one time-stamped progress line on stderr (not with
// --json).
func (g *Globals) progress(format string, args ...any) {
	if !g.json {
		fmt.Fprintf(g.stderr, "  %s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}

// newSeedAliases are the node commands under the names of the seed's
// command line: computenode_list, computenode_infos NODE and
// computenode_switchmode NODE MODE.
func newSeedAliases(g *Globals) []*cobra.Command {
	list, infos, mode := newNodeListCmd(g, "computenode_list"), newNodeShowCmd(g, "computenode_infos"), newNodeModeCmd(g, "computenode_switchmode")
	for _, c := range []struct {
		cmd *cobra.Command
		of  string
	}{{list, "node list"}, {infos, "node show"}, {mode, "node mode"}} {
		c.cmd.Short = "Same as `corpus " + c.of + "` (the seed's name)"
		c.cmd.Long = ""
	}
	return []*cobra.Command{list, infos, mode}
}
