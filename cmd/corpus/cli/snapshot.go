package cli

import (
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"corpus/client"
	"corpus/internal/snapshotfile"
	"corpus/internal/units"
	corpusv1 "corpus/proto/corpus/v1"
)

// newSnapshotCmd is `corpus operator snapshot`: copies of the control
// plane for disaster recovery.
func newSnapshotCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "Save and inspect snapshots of the control plane (restore: corpus coordinator --restore)"}
	var keyFile string
	save := &cobra.Command{
		Use:   "save FILE --key-file KEY",
		Short: "Save a consistent snapshot of the cluster's state and CA into FILE, sealed with KEY",
		Long: `Save a consistent snapshot of the cluster into FILE: the replicated state
(every node, guest, project, release, route, DNS record, user and token)
and the cluster CA, which also opens the sealed-value keyring. The leader
takes it once every committed write is applied. Everything but a short
header is sealed with a key derived (scrypt) from the secret in KEY,
which never leaves this machine: keep KEY apart from the snapshots. FILE
appears whole or not at all. Restore with corpus coordinator --restore.`,
		Example: `  head -c 32 /dev/urandom | base64 > /root/snapshot.key
  corpus operator snapshot save /backup/corpus.snap --key-file /root/snapshot.key`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keyFile == "" {
				return fmt.Errorf("give the key the snapshot is sealed with: --key-file KEY (make one with: head -c 32 /dev/urandom | base64 > KEY)")
			}
			secret, err := snapshotfile.ReadSecret(keyFile)
			if err != nil {
				return err
			}
			c, err := g.Clients()
			if err != nil {
				return err
			}
			start := time.Now()
			h, err := c.SaveSnapshot(cmd.Context(), args[0], secret, g.byteProgress("received"))
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(h)
			}
			fmt.Fprintf(g.stdout, "snapshot of cluster %s at raft index %d saved to %s (%s, %s)\n", h.ClusterId, h.RaftIndex, args[0], units.FormatSize(int64(h.PayloadSize)), time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	save.Flags().StringVar(&keyFile, "key-file", "", "file holding the secret (a passphrase or random bytes, at least 16) the snapshot is sealed with")
	inspect := &cobra.Command{
		Use:   "inspect FILE",
		Short: "Print a snapshot's header and object counts, and check its checksum (no key needed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := client.InspectSnapshot(args[0])
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(h)
			}
			printSnapshotHeader(g, h)
			return nil
		},
	}
	cmd.AddCommand(save, inspect)
	return cmd
}

func printSnapshotHeader(g *Globals, h *corpusv1.SnapshotHeader) {
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "cluster id\t%s\n", h.ClusterId)
	fmt.Fprintf(w, "raft index\t%d\n", h.RaftIndex)
	fmt.Fprintf(w, "raft term\t%d\n", h.RaftTerm)
	fmt.Fprintf(w, "taken by\t%s\n", h.CorpusVersion)
	fmt.Fprintf(w, "created\t%s\n", h.CreatedAt.AsTime().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "format\t%d\n", h.FormatVersion)
	fmt.Fprintf(w, "size\t%s\n", units.FormatSize(int64(h.PayloadSize)))
	fmt.Fprintf(w, "sha256\t%s (checked)\n", hex.EncodeToString(h.PayloadSha256))
	kinds := make([]string, 0, len(h.Counts))
	for k := range h.Counts {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "%s\t%d\n", k, h.Counts[k])
	}
	w.Flush()
}

// byteProgress returns a progress function that keeps one line on a
// terminal's stderr up to date for transfers over a few MiB; nil when
// stderr is no terminal or --json is set.
func (g *Globals) byteProgress(verb string) func(done, total uint64) {
	f, ok := g.stderr.(*os.File)
	if g.json || !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return func(done, total uint64) {
		if total < 8<<20 {
			return
		}
		fmt.Fprintf(f, "\r  %s %s of %s", verb, units.FormatSize(int64(done)), units.FormatSize(int64(total)))
		if done >= total {
			fmt.Fprintln(f)
		}
	}
}
