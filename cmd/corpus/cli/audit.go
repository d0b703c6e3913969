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

func newAuditCmd(g *Globals) *cobra.Command {
	var req corpusv1.ListAuditRequest
	var limit int
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show who changed what: every write, refused ones included",
		Example: `  corpus audit
  corpus audit --actor user:alice --limit 20
  corpus audit --action create_guest --target web
  corpus audit --all        # agents' reports and the control plane's own writes too`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req.Limit = int32(limit)
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListAuditResponse], error) {
				return c.Audit.ListAudit(ctx, connect.NewRequest(&req))
			}, func(m *corpusv1.ListAuditResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "INDEX\tTIME\tACTOR\tACTION\tTARGET\tRESULT")
				for _, e := range m.Entries {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\n", e.Index, localTime(e.Time), e.Actor, e.Action, dash(e.Target), e.Result)
				}
				return w.Flush()
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Actor, "actor", "", "only this actor (ops, user:NAME, node:NAME, system)")
	f.StringVar(&req.Action, "action", "", "only this action (create_guest, set_guest_desired, ...)")
	f.StringVar(&req.Target, "target", "", "only writes to this object")
	f.IntVar(&limit, "limit", 100, "newest entries to show")
	f.BoolVar(&req.IncludeSystem, "all", false, "include agents' reports and the control plane's own writes")
	return cmd
}
