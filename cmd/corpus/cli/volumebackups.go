package cli

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	corpusv1 "corpus/proto/corpus/v1"
)

// Backups of volumes: take, list, restore, schedule. Export, import and
// delete go by backup id through `corpus service export|delete-backup`.

func newVolumeBackupCmds(g *Globals) []*cobra.Command {
	backup := &cobra.Command{
		Use:   "backup NAME",
		Short: "Take a backup of a volume's files now (a snapshot's, consistent), kept on another node",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return followBackup(g, cmd.Context(), false, func(ctx context.Context, c *client.Clients) (*connect.ServerStreamForClient[corpusv1.BackupProgress], error) {
				return c.Volumes.BackupVolume(ctx, connect.NewRequest(&corpusv1.BackupVolumeRequest{Name: args[0]}))
			})
		},
	}
	list := &cobra.Command{
		Use:   "backups NAME",
		Short: "List a volume's backups, newest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return listBackups(g, cmd.Context(), &corpusv1.ListBackupsRequest{Volume: args[0]}, "corpus volume backup "+args[0])
		},
	}
	var from string
	restore := &cobra.Command{
		Use:   "restore NAME [--from ID]",
		Short: "Replace a volume's files with a backup's (its newest by default); its guest is stopped meanwhile",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return followBackup(g, cmd.Context(), true, func(ctx context.Context, c *client.Clients) (*connect.ServerStreamForClient[corpusv1.BackupProgress], error) {
				return c.Volumes.RestoreVolume(ctx, connect.NewRequest(&corpusv1.RestoreVolumeRequest{Name: args[0], From: from}))
			})
		},
	}
	restore.Flags().StringVar(&from, "from", "", "the backup's id (corpus volume backups NAME); a backup of another volume fits too")
	var schedule string
	var keep uint32
	update := &cobra.Command{
		Use:   "update NAME [--backup-schedule hourly|daily|weekly|none] [--keep N]",
		Short: "Change when a volume's backups are taken and how many are kept",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.UpdateVolumeResponse], error) {
				return c.Volumes.UpdateVolume(ctx, connect.NewRequest(&corpusv1.UpdateVolumeRequest{Name: args[0], BackupSchedule: schedule, BackupKeep: keep}))
			}, func(m *corpusv1.UpdateVolumeResponse) error {
				v := m.Volume.Volume
				s := v.BackupSchedule
				if s == "" {
					s = "none"
				}
				verb := "unchanged"
				if m.Changed {
					verb = "set"
				}
				_, err := fmt.Fprintf(g.stdout, "volume %s: backup schedule %s, keeping %d (%s)\n", v.Name, s, keepOrDefault(v.BackupKeep), verb)
				return err
			})
		},
	}
	update.Flags().StringVar(&schedule, "backup-schedule", "", "hourly, daily, weekly, or none")
	update.Flags().Uint32Var(&keep, "keep", 0, "how many scheduled backups to keep (7 by default)")
	return []*cobra.Command{backup, list, restore, update}
}

// keepOrDefault is how many scheduled backups a keep setting keeps.
func keepOrDefault(keep uint32) uint32 {
	if keep == 0 {
		return corpusv1.DefaultBackupKeep
	}
	return keep
}
