package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	"corpus/internal/units"
	corpusv1 "corpus/proto/corpus/v1"
)

// newImageCmd is the nodes' image caches; `corpus image build` (a host
// command, package daemon) joins it.
func newImageCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "Guest images: the nodes' image caches, and builds on this host"}
	var node string
	list := &cobra.Command{
		Use:     "list [--node NODE]",
		Aliases: []string{"ls"},
		Short:   "List the images nodes keep, with their size, last use and the guests using them",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListImagesResponse], error) {
				return c.Nodes.ListImages(ctx, connect.NewRequest(&corpusv1.ListImagesRequest{Node: node}))
			}, func(msg *corpusv1.ListImagesResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NODE\tIMAGE\tDIGEST\tSIZE\tSHARED\tLAST USED\tGUESTS")
				for _, img := range msg.Images {
					last := "-"
					if img.LastUsed != nil {
						last = age(img.LastUsed.AsTime()) + " ago"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", img.Node, img.Name, dash(shortDigest(img.Digest)),
						units.FormatSize(img.SizeBytes), units.FormatSize(img.SharedBytes), last, dash(strings.Join(img.Guests, ",")))
				}
				if err := w.Flush(); err != nil {
					return err
				}
				for _, u := range msg.Usage {
					fmt.Fprintf(g.stderr, "node %s: %d images, %s on disk\n", u.Node, u.Images, units.FormatSize(u.Bytes))
				}
				return g.unreachable(msg.Unreachable, "their images are not listed")
			})
		},
	}
	list.Flags().StringVar(&node, "node", "", "only this node (default: every node)")

	rm := &cobra.Command{
		Use:     "rm NODE IMAGE",
		Aliases: []string{"remove"},
		Short:   "Remove an image from a node's cache (refused while a guest uses it)",
		Example: `  corpus image rm n1 busybox
  corpus image rm n1 registry.example:5000/app:1
  corpus image rm n1 sha256:4f2a...`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.RemoveImageResponse], error) {
				return c.Nodes.RemoveImage(ctx, connect.NewRequest(&corpusv1.RemoveImageRequest{Node: args[0], Image: args[1]}))
			}, func(msg *corpusv1.RemoveImageResponse) error {
				_, err := fmt.Fprintf(g.stdout, "removed image %s from node %s, freed %s\n", msg.Image.GetName(), args[0], units.FormatSize(msg.FreedBytes))
				return err
			})
		},
	}

	var pruneNode string
	prune := &cobra.Command{
		Use:   "prune [--node NODE]",
		Short: "Remove every image no guest uses from the nodes' caches, layers included",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.PruneImagesResponse], error) {
				return c.Nodes.PruneImages(ctx, connect.NewRequest(&corpusv1.PruneImagesRequest{Node: pruneNode}))
			}, func(msg *corpusv1.PruneImagesResponse) error {
				for _, img := range msg.Removed {
					fmt.Fprintf(g.stdout, "removed %s from node %s\n", img.Name, img.Node)
				}
				fmt.Fprintf(g.stdout, "%d images removed, freed %s\n", len(msg.Removed), units.FormatSize(msg.FreedBytes))
				return g.unreachable(msg.Unreachable, "they were not pruned")
			})
		},
	}
	prune.Flags().StringVar(&pruneNode, "node", "", "only this node (default: every node)")
	cmd.AddCommand(list, rm, prune)
	return cmd
}

// unreachable reports the nodes that did not answer, as an error once
// the others' answers are printed.
func (g *Globals) unreachable(nodes map[string]string, what string) error {
	if len(nodes) == 0 {
		return nil
	}
	var names []string
	for n, why := range nodes {
		names = append(names, n)
		fmt.Fprintf(g.stderr, "node %s did not answer: %s\n", n, why)
	}
	slices.Sort(names)
	return fmt.Errorf("nodes %s did not answer: %s (retry once they are up)", strings.Join(names, ", "), what)
}

// shortDigest is a digest's algorithm and first 12 hex digits.
func shortDigest(d string) string {
	if alg, hex, ok := strings.Cut(d, ":"); ok && len(hex) > 12 {
		return alg + ":" + hex[:12]
	}
	return d
}
