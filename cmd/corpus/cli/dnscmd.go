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

func newDNSCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "dns", Short: "Show the cluster's DNS zone and manage its static records"}
	records := &cobra.Command{
		Use:   "records",
		Short: "List every record the zone holds (generated and static)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListRecordsResponse], error) {
				return c.DNS.ListRecords(ctx, connect.NewRequest(&corpusv1.ListRecordsRequest{}))
			}, func(msg *corpusv1.ListRecordsResponse) error {
				fmt.Fprintf(g.stdout, "zone %s serial %d, answered on %s\n", msg.Zone, msg.Serial, msg.DnsAddr)
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tTTL\tTYPE\tDATA\tSTATIC ID\tWARNING")
				skipped := 0
				for _, r := range msg.Records {
					if r.Warning != "" {
						skipped++
					}
					fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", r.Name, r.Ttl, r.Type, r.Data, dash(r.StaticId), dash(r.Warning))
				}
				if err := w.Flush(); err != nil {
					return err
				}
				if skipped > 0 {
					fmt.Fprintf(g.stderr, "warning: %d records are not served (see WARNING); the rest of the zone is\n", skipped)
				}
				return nil
			})
		},
	}
	var ttl uint32
	add := &cobra.Command{
		Use:   "add NAME TYPE DATA",
		Short: "Add a static record (A, AAAA, CNAME, TXT, MX, SRV), replicated like everything else",
		Example: `  corpus dns add www A 10.0.0.5
  corpus dns add mail MX "10 mx.example.com."
  corpus dns add _pg._tcp.db SRV "0 10 5432 db.guest"
  corpus dns add @ TXT "v=spf1 -all"                     # one string, as written
  corpus dns add @ TXT '"part one" "part two"'           # quoted: the zone-file form`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.AddRecordResponse], error) {
				return c.DNS.AddRecord(ctx, connect.NewRequest(&corpusv1.AddRecordRequest{Name: args[0], Type: args[1], Data: args[2], Ttl: ttl}))
			}, func(msg *corpusv1.AddRecordResponse) error {
				verb := "added"
				if !msg.Created {
					verb = "already present"
				}
				r := msg.Record
				fmt.Fprintf(g.stdout, "%s %s %d %s %s (id %s)\n", verb, r.Name, r.Ttl, r.Type, r.Data, r.Id)
				return nil
			})
		},
	}
	add.Flags().Uint32Var(&ttl, "ttl", 0, "time to live in seconds (default 30)")
	del := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a static record by the id `corpus dns records` shows",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.DeleteRecordResponse], error) {
				return c.DNS.DeleteRecord(ctx, connect.NewRequest(&corpusv1.DeleteRecordRequest{Id: args[0]}))
			}, func(msg *corpusv1.DeleteRecordResponse) error {
				fmt.Fprintf(g.stdout, "deleted %s %s %s\n", msg.Record.Name, msg.Record.Type, msg.Record.Data)
				return nil
			})
		},
	}
	cmd.AddCommand(records, add, del)
	return cmd
}
