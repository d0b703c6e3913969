package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	"corpus/internal/units"
	corpusv1 "corpus/proto/corpus/v1"
)

// Backups of services and volumes: take, list, restore, export to a
// file, import one.

func newBackupCmds(g *Globals) []*cobra.Command {
	backup := &cobra.Command{
		Use:   "backup NAME",
		Short: "Take a consistent backup of a service now, kept on another node",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return followBackup(g, cmd.Context(), false, func(ctx context.Context, c *client.Clients) (*connect.ServerStreamForClient[corpusv1.BackupProgress], error) {
				return c.Services.BackupService(ctx, connect.NewRequest(&corpusv1.BackupServiceRequest{Name: args[0]}))
			})
		},
	}
	list := &cobra.Command{
		Use:   "backups [SERVICE]",
		Short: "List backups, newest first",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &corpusv1.ListBackupsRequest{}
			if len(args) == 1 {
				req.Service = args[0]
			}
			return listBackups(g, cmd.Context(), req, "corpus service backup NAME")
		},
	}
	var from, toNode string
	restore := &cobra.Command{
		Use:   "restore NAME [--from ID]",
		Short: "Load a backup into a service (its newest by default), once its checksum is verified",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return followBackup(g, cmd.Context(), true, func(ctx context.Context, c *client.Clients) (*connect.ServerStreamForClient[corpusv1.BackupProgress], error) {
				return c.Services.RestoreService(ctx, connect.NewRequest(&corpusv1.RestoreServiceRequest{Name: args[0], From: from, ToNode: toNode}))
			})
		},
	}
	restore.Flags().StringVar(&from, "from", "", "the backup's id (corpus service backups NAME)")
	restore.Flags().StringVar(&toNode, "to-node", "", "restore a lost service onto this node")
	var out string
	export := &cobra.Command{
		Use:   "export BACKUP_ID [-o FILE]",
		Short: "Copy a backup to a file here (stdout by default), checked against its SHA-256",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return exportBackup(g, cmd, args[0], out)
		},
	}
	export.Flags().StringVarP(&out, "output", "o", "", "the file to write (made new; stdout when empty)")
	imp := &cobra.Command{
		Use:   "import SERVICE FILE",
		Short: "Keep a backup file from here as a backup of a service (FILE - reads stdin); restore it with --from",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return importBackup(g, cmd, args[0], args[1])
		},
	}
	del := &cobra.Command{
		Use:   "delete-backup BACKUP_ID",
		Short: "Delete a backup and its file",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.DeleteBackupResponse], error) {
				return c.Services.DeleteBackup(ctx, connect.NewRequest(&corpusv1.DeleteBackupRequest{Id: args[0]}))
			}, func(m *corpusv1.DeleteBackupResponse) error {
				_, err := fmt.Fprintf(g.stdout, "backup %s of %s deleted\n", m.Backup.Id, m.Backup.Service)
				return err
			})
		},
	}
	return []*cobra.Command{backup, list, restore, export, imp, del}
}

// listBackups prints the backups req asks for, newest first; hint says
// how to take one.
func listBackups(g *Globals, ctx context.Context, req *corpusv1.ListBackupsRequest, hint string) error {
	return call(g, ctx, func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListBackupsResponse], error) {
		return c.Services.ListBackups(ctx, connect.NewRequest(req))
	}, func(m *corpusv1.ListBackupsResponse) error {
		if len(m.Backups) == 0 {
			fmt.Fprintf(g.stdout, "no backups (%s)\n", hint)
			return nil
		}
		sortedBackups(m.Backups)
		w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tOF\tTAKEN\tSIZE\tKEPT ON\tTRIGGER\tSTATUS")
		for _, b := range m.Backups {
			fmt.Fprintln(w, backupLine(b.Backup, b.NodeName))
		}
		return w.Flush()
	})
}

// followBackup prints a backup's or restore's progress and, with --json,
// the backup at the end.
func followBackup(g *Globals, ctx context.Context, restore bool, start func(context.Context, *client.Clients) (*connect.ServerStreamForClient[corpusv1.BackupProgress], error)) error {
	c, err := g.Clients()
	if err != nil {
		return err
	}
	stream, err := start(ctx, c)
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
		m := stream.Msg()
		if m.Phase == "done" {
			if g.json {
				return g.printJSON(m)
			}
			b := m.Backup
			if m.Message != "" {
				fmt.Fprintln(g.stdout, m.Message)
			}
			if restore {
				_, err := fmt.Fprintf(g.stdout, "done: restored from backup %s of %s (%s, SHA-256 %s)\n", b.Id, backupOf(b), units.FormatSize(b.SizeBytes), b.Sha256)
				return err
			}
			_, err := fmt.Fprintf(g.stdout, "done: backup %s of %s, %s, SHA-256 %s\n", b.Id, backupOf(b), units.FormatSize(b.SizeBytes), b.Sha256)
			return err
		}
		if g.json {
			continue
		}
		switch {
		case m.Message != "":
			fmt.Fprintln(g.stderr, m.Message)
		case m.DoneBytes > 0:
			fmt.Fprintf(g.stderr, "%s: %s\n", m.Phase, units.FormatSize(m.DoneBytes))
		}
	}
	if err := stream.Err(); err != nil {
		return err
	}
	return errors.New("the coordinator ended the stream before it was done")
}

func exportBackup(g *Globals, cmd *cobra.Command, id, path string) error {
	c, err := g.Clients()
	if err != nil {
		return err
	}
	stream, err := c.Services.ExportBackup(cmd.Context(), connect.NewRequest(&corpusv1.ExportBackupRequest{Id: id}))
	if err != nil {
		return err
	}
	defer stream.Close()
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return err
		}
		return errors.New("the coordinator sent nothing")
	}
	head := stream.Msg().Backup
	var w io.Writer = g.stdout
	var f *os.File
	if path != "" {
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return err
		}
		w = f
	}
	h := sha256.New()
	var n int64
	for stream.Receive() {
		d := stream.Msg().Data
		if _, err := w.Write(d); err != nil {
			return err
		}
		h.Write(d)
		n += int64(len(d))
	}
	err = stream.Err()
	if got := hex.EncodeToString(h.Sum(nil)); err == nil && (n != head.SizeBytes || got != head.Sha256) {
		err = fmt.Errorf("received %d bytes with SHA-256 %s; backup %s is %d bytes with %s", n, got, id, head.SizeBytes, head.Sha256)
	}
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
			return err
		}
		fmt.Fprintf(g.stderr, "backup %s of %s (%s %s, %s) written to %s\n", id, head.Service, head.Template, head.Version, units.FormatSize(n), path)
	}
	return err
}

func importBackup(g *Globals, cmd *cobra.Command, service, path string) error {
	var f *os.File
	if path == "-" {
		// Read once to a file to know the checksum the first message
		// gives.
		tmp, err := os.CreateTemp("", "corpus-import-")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name())
		defer tmp.Close()
		if _, err := io.Copy(tmp, cmd.InOrStdin()); err != nil {
			return err
		}
		f = tmp
	} else {
		var err error
		if f, err = os.Open(path); err != nil {
			return err
		}
		defer f.Close()
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	c, err := g.Clients()
	if err != nil {
		return err
	}
	stream := c.Services.ImportBackup(cmd.Context())
	if err := stream.Send(&corpusv1.BackupChunk{Backup: &corpusv1.Backup{Service: service, Sha256: hex.EncodeToString(h.Sum(nil)), SizeBytes: size}}); err == nil {
		buf := make([]byte, 1<<20)
		for {
			n, rerr := f.Read(buf)
			if n > 0 {
				if err := stream.Send(&corpusv1.BackupChunk{Data: buf[:n]}); err != nil {
					break
				}
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				return rerr
			}
		}
	}
	res, err := stream.CloseAndReceive()
	if err != nil {
		return err
	}
	if g.json {
		return g.printJSON(res.Msg)
	}
	b := res.Msg.Backup
	_, err = fmt.Fprintf(g.stdout, "imported as backup %s of %s (%s); restore it with: corpus service restore %s --from %s\n", b.Id, service, units.FormatSize(b.SizeBytes), service, b.Id)
	return err
}

// readAllLimited reads r up to limit bytes.
func readAllLimited(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("more than %d bytes", limit)
	}
	return b, nil
}
