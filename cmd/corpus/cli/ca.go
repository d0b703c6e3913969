package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	corpusv1 "corpus/proto/corpus/v1"
)

// newCACmd is `corpus operator ca`: the cluster CA and its rotation.
func newCACmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "ca", Short: "The cluster CA: show it, rotate it"}
	var pemOut bool
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster CA and the rotation in progress, if any",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.CaStatusResponse], error) {
				return c.Cluster.CaStatus(ctx, connect.NewRequest(&corpusv1.CaStatusRequest{}))
			}, func(m *corpusv1.CaStatusResponse) error {
				if pemOut {
					_, err := io.WriteString(g.stdout, m.Status.TrustedPem)
					return err
				}
				return printCAStatus(g.stdout, m.Status)
			})
		},
	}
	status.Flags().BoolVar(&pemOut, "pem", false, "print the CAs to trust now (PEM), for `corpus env add --ca-cert`")
	var finish, abort, noWait bool
	var timeout time.Duration
	rotate := &cobra.Command{
		Use:   "rotate [--finish | --abort] [--no-wait]",
		Short: "Replace the cluster CA, with every replica and node moved to it and nothing stopped",
		Long: `Replace the cluster CA. A new CA is made; every replica and node comes
to trust it beside the old one (trust phase); then it signs, and each
gets a certificate of it (sign phase); once all hold one, the old CA is
retired and the keyring's keys are wrapped for the new one. Nothing stops
talking at any point. The command follows the rotation to its end, and
then saves the new CA into this environment of the CLI config; other
users get it from ` + "`corpus operator ca status --pem`" + `.

A node or replica that is down holds the rotation up: bring it back,
remove it, or end the rotation without it (--finish; a node left out
then joins again with a new join token). --abort cancels a rotation in
its trust phase.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if finish && abort {
				return errors.New("give --finish or --abort, not both")
			}
			e, err := g.Endpoint()
			if err != nil {
				return err
			}
			c, err := client.New(e, g.consistent)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			res, err := c.Cluster.RotateCa(ctx, connect.NewRequest(&corpusv1.RotateCaRequest{Finish: finish, Abort: abort}))
			if err != nil {
				return err
			}
			st := res.Msg.Status
			if abort || noWait {
				if _, err := g.SaveCA(st.TrustedPem); err != nil {
					return fmt.Errorf("saving the CAs to trust into the CLI config: %w", err)
				}
				if g.json {
					return g.printJSON(st)
				}
				if abort {
					fmt.Fprintln(g.stdout, "CA rotation aborted: the cluster CA stays", short(st.Current.Pin))
					return nil
				}
				return printCAStatus(g.stdout, st)
			}
			target := st.GetNext().GetPin()
			if finish {
				target = st.Current.Pin
			}
			if !g.json {
				fmt.Fprintf(g.stderr, "rotating the cluster CA from %s to %s\n", short(st.Current.Pin), short(target))
			}
			wctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			said := ""
			saved := ""
			for {
				// The CLI trusts what the cluster trusts as the rotation
				// goes (the new CA from its trust phase, then it alone),
				// and saves it for its next runs at once: the new CA
				// signs after the trust period (--ca-trust-period).
				if st.TrustedPem != "" && st.TrustedPem != e.CACert {
					e.CACert = st.TrustedPem
					if c, err = client.New(e, g.consistent); err != nil {
						return err
					}
					if saved, err = g.SaveCA(st.TrustedPem); err != nil {
						return fmt.Errorf("saving the CAs to trust into the CLI config: %w", err)
					}
				}
				if st.Next == nil && st.Current.Pin == target {
					break
				}
				if line := caProgress(st); line != said && !g.json {
					fmt.Fprintln(g.stderr, line)
					said = line
				}
				select {
				case <-wctx.Done():
					return fmt.Errorf("the rotation has not ended after %s (%s): it goes on; follow it with `corpus operator ca status`", timeout, said)
				case <-time.After(time.Second):
				}
				res, err := c.Cluster.CaStatus(wctx, connect.NewRequest(&corpusv1.CaStatusRequest{}))
				if err != nil {
					if connect.CodeOf(err) == connect.CodeUnavailable || wctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
						continue
					}
					return err
				}
				st = res.Msg.Status
			}
			if g.json {
				return g.printJSON(st)
			}
			fmt.Fprintf(g.stdout, "the cluster CA is now %s (%s, until %s)\n", short(st.Current.Pin), st.Current.Subject, st.Current.NotAfter.AsTime().Format("2006-01-02"))
			if saved != "" {
				fmt.Fprintf(g.stdout, "saved it as the CA environment %s trusts\n", saved)
			}
			return nil
		},
	}
	rotate.Flags().BoolVar(&finish, "finish", false, "end the rotation in progress now, leaving out the replicas and nodes that have not moved")
	rotate.Flags().BoolVar(&abort, "abort", false, "cancel the rotation in progress (in its trust phase)")
	rotate.Flags().BoolVar(&noWait, "no-wait", false, "start it and return; follow it with `corpus operator ca status`")
	rotate.Flags().DurationVar(&timeout, "timeout", 15*time.Minute, "how long to follow the rotation")
	cmd.AddCommand(status, rotate)
	return cmd
}

// short is a pin's first 16 hex digits.
func short(pin string) string {
	if len(pin) > 16 {
		return pin[:16]
	}
	return pin
}

// caProgress is one line on a rotation's progress.
func caProgress(st *corpusv1.CaStatus) string {
	if st.Next == nil {
		return "the rotation ended"
	}
	count := func(hs []*corpusv1.CaHolder) (n int) {
		for _, h := range hs {
			if (st.Phase == "trust" && h.Trusts) || (st.Phase == "sign" && h.Moved) {
				n++
			}
		}
		return n
	}
	verb := "trust the new CA"
	if st.Phase == "sign" {
		verb = "hold a certificate of it"
	}
	return fmt.Sprintf("%s phase: %d/%d replicas and %d/%d nodes %s", st.Phase, count(st.Replicas), len(st.Replicas), count(st.Nodes), len(st.Nodes), verb)
}

func printCAStatus(w io.Writer, st *corpusv1.CaStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	info := func(label string, c *corpusv1.CaInfo) {
		fmt.Fprintf(tw, "%s\t%s\t%s\tvalid until %s\n", label, short(c.Pin), c.Subject, c.NotAfter.AsTime().Format("2006-01-02"))
	}
	info("Cluster CA:", st.Current)
	if st.Next == nil {
		fmt.Fprintln(tw, "Rotation:\tnone in progress")
		return tw.Flush()
	}
	info("Rotating to:", st.Next)
	fmt.Fprintf(tw, "Rotation:\t%s phase, started %s ago by %s\n", st.Phase, age(st.StartedAt.AsTime()), dash(st.StartedBy))
	fmt.Fprintln(tw, "\nKIND\tNAME\tCA\tTRUSTS NEW\tMOVED\tSTATUS")
	for _, h := range st.Replicas {
		fmt.Fprintf(tw, "replica\t%s\t%s\t%t\t%t\t-\n", h.Name, dash(short(h.CaPin)), h.Trusts, h.Moved)
	}
	for _, h := range st.Nodes {
		fmt.Fprintf(tw, "node\t%s\t%s\t%t\t%t\t%s\n", h.Name, dash(short(h.CaPin)), h.Trusts, h.Moved, dash(h.Status))
	}
	return tw.Flush()
}
