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
	cmd := &cobra.Command{Use: "snapshot", Short: "Save, inspect and restore snapshots of the control plane (a new group from one: corpus coordinator --restore)"}
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
appears whole or not at all. Restore it into the running group with
corpus operator snapshot restore, or start a new group from it with
corpus coordinator --restore.`,
		Example: `  head -c 32 /dev/urandom | base64 > /root/snapshot.key
  corpus operator snapshot save /backup/corpus.snap --key-file /root/snapshot.key`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			secret, err := readSnapshotKey(keyFile)
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
	var force, yes bool
	restore := &cobra.Command{
		Use:   "restore FILE --key-file KEY [--force] [--yes]",
		Short: "Restore a snapshot into the running group: every replica takes its state",
		Long: `Send the snapshot in FILE to the cluster; its leader checks it (checksum,
key, format, cluster id) and installs it through Raft, so every replica
ends with the snapshot's state: what was written after it is gone, what
was deleted after it is back. The group keeps its own identity: cluster
id, CA, keys, replicas and cluster version. Guests created after the
snapshot keep running on their nodes and are reported as orphans
(corpus guest list --orphans), not destroyed. A snapshot of another
cluster is refused unless --force, which takes its objects into this
cluster (its nodes must enroll again). A damaged file, a wrong key or
a newer format is refused and changes nothing. To start a new group
from a snapshot instead (every replica lost): corpus coordinator --restore.`,
		Example: `  corpus operator snapshot restore /backup/corpus.snap --key-file /root/snapshot.key`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			secret, err := readSnapshotKey(keyFile)
			if err != nil {
				return err
			}
			h, err := client.InspectSnapshot(args[0])
			if err != nil {
				return err
			}
			question := fmt.Sprintf("Replace the whole state of the cluster with the snapshot of cluster %s at raft index %d, taken %s",
				h.ClusterId, h.RaftIndex, h.CreatedAt.AsTime().UTC().Format(time.RFC3339))
			if err := g.confirm(cmd, yes, question); err != nil {
				return err
			}
			c, err := g.Clients()
			if err != nil {
				return err
			}
			if !g.json {
				fmt.Fprintf(g.stderr, "sending %s (%s) to the leader, which checks and installs it...\n", args[0], units.FormatSize(int64(h.PayloadSize)))
			}
			start := time.Now()
			res, err := c.RestoreSnapshot(cmd.Context(), args[0], secret, force, g.byteProgress("sent"))
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res)
			}
			fmt.Fprintf(g.stdout, "restored index %d term %d, %d objects (snapshot of cluster %s at index %d, %s)\n",
				res.RaftIndex, res.RaftTerm, res.Objects, res.SnapshotClusterId, res.SnapshotIndex, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	restore.Flags().StringVar(&keyFile, "key-file", "", "file holding the secret the snapshot was sealed with")
	restore.Flags().BoolVar(&force, "force", false, "restore a snapshot of another cluster, under this cluster's identity")
	addYes(restore, &yes)
	cmd.AddCommand(save, inspect, restore)
	return cmd
}

// readSnapshotKey reads the secret a snapshot is sealed with from the
// --key-file given.
func readSnapshotKey(keyFile string) ([]byte, error) {
	if keyFile == "" {
		return nil, fmt.Errorf("give the key the snapshot is sealed with: --key-file KEY (make one with: head -c 32 /dev/urandom | base64 > KEY)")
	}
	return snapshotfile.ReadSecret(keyFile)
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
