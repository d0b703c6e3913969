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
	corpusv1 "corpus/proto/corpus/v1"
)

func newReleaseCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "release", Short: "List and inspect the deploys of a project environment"}
	var env string
	var withLog bool
	list := &cobra.Command{
		Use:     "list PROJECT [--env ENV]",
		Aliases: []string{"ls"},
		Short:   "List releases, newest first; * marks the one serving",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListReleasesResponse], error) {
				return c.Projects.ListReleases(ctx, connect.NewRequest(&corpusv1.ListReleasesRequest{Project: args[0], Env: env}))
			}, func(msg *corpusv1.ListReleasesResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "ID\tSOURCE\tAUTHOR\tSTARTED\tSTATUS\tDURATION\tTRIGGER\tSUBJECT")
				for _, r := range msg.Releases {
					id := corpusv1.ReleaseName(r.Number)
					if r.Number == msg.Current {
						id += "*"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, releaseSource(r), dash(r.Author), localTime(r.StartedAt),
						releaseStatus(r), releaseDuration(r), releaseTrigger(r), dash(r.Subject))
				}
				return w.Flush()
			})
		},
	}
	show := &cobra.Command{
		Use:   "show PROJECT RELEASE [--env ENV] [--log]",
		Short: "Show one release (r3): commit, author, steps and their durations, why it failed",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseRelease(args[1])
			if err != nil {
				return err
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.GetReleaseResponse], error) {
				return c.Projects.GetRelease(ctx, connect.NewRequest(&corpusv1.GetReleaseRequest{Project: args[0], Env: env, Release: corpusv1.ReleaseName(n)}))
			}, func(msg *corpusv1.GetReleaseResponse) error {
				r := msg.Release
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				current := ""
				if msg.Current {
					current = " (current)"
				}
				fmt.Fprintf(w, "Release:\t%s%s\n", corpusv1.ReleaseName(r.Number), current)
				fmt.Fprintf(w, "Project:\t%s/%s\n", r.Project, r.Env)
				fmt.Fprintf(w, "Status:\t%s\n", releaseStatus(r))
				if r.Image != "" {
					fmt.Fprintf(w, "Image:\t%s\n", r.Image)
					fmt.Fprintf(w, "Digest:\t%s\n", dash(r.ImageDigest))
				} else {
					fmt.Fprintf(w, "Commit:\t%s\n", dash(r.Commit))
				}
				fmt.Fprintf(w, "Subject:\t%s\n", dash(r.Subject))
				fmt.Fprintf(w, "Author:\t%s\n", dash(r.Author))
				fmt.Fprintf(w, "Trigger:\t%s\n", releaseTrigger(r))
				if len(r.Processes) > 0 {
					fmt.Fprintf(w, "Processes:\t%s\n", strings.Join(r.Processes, ", "))
				}
				fmt.Fprintf(w, "Started:\t%s\n", localTime(r.StartedAt))
				fmt.Fprintf(w, "Finished:\t%s (took %s)\n", localTime(r.FinishedAt), releaseDuration(r))
				if r.FailedStep != "" {
					fmt.Fprintf(w, "Failed step:\t%s\n", r.FailedStep)
				}
				if r.Message != "" {
					fmt.Fprintf(w, "Message:\t%s\n", r.Message)
				}
				fmt.Fprintln(w, "Steps:")
				for _, s := range r.Steps {
					fmt.Fprintf(w, "  %s\t%s\t%s\n", s.Name, s.Status, formatDuration(time.Duration(s.DurationMs)*time.Millisecond))
				}
				if err := w.Flush(); err != nil {
					return err
				}
				if withLog {
					fmt.Fprintln(g.stdout, "Log:")
					fmt.Fprint(g.stdout, r.Log)
					if r.Log != "" && !strings.HasSuffix(r.Log, "\n") {
						fmt.Fprintln(g.stdout)
					}
				}
				return nil
			})
		},
	}
	show.Flags().BoolVar(&withLog, "log", false, "also print the deploy's stored output (its tail when long)")
	for _, c := range []*cobra.Command{list, show} {
		c.Flags().StringVar(&env, "env", "", "the project's environment (needed when it has several)")
	}
	cmd.AddCommand(list, show)
	return cmd
}

func newRollbackCmd(g *Globals) *cobra.Command {
	var env, to string
	cmd := &cobra.Command{
		Use:   "rollback PROJECT [--env ENV] [--to RELEASE]",
		Short: "Serve an earlier kept release again, without rebuilding (by default the newest good one before the current)",
		Example: `  corpus rollback hello
  corpus rollback hello --env prod --to r2`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &corpusv1.RollbackRequest{Project: args[0], Env: env}
			if to != "" {
				n, err := parseRelease(to)
				if err != nil {
					return fmt.Errorf("--to: %w", err)
				}
				req.To = n
			}
			c, err := g.Clients()
			if err != nil {
				return err
			}
			// The releases say which environment the coordinator picks
			// when --env is not given, and which release serves now.
			before, err := c.Projects.ListReleases(cmd.Context(), connect.NewRequest(&corpusv1.ListReleasesRequest{Project: args[0], Env: env}))
			if err != nil {
				return err
			}
			req.Env = before.Msg.Env
			where := args[0] + "/" + req.Env
			stream, err := c.Projects.Rollback(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			defer stream.Close()
			var out strings.Builder
			for stream.Receive() {
				m := stream.Msg()
				if g.json {
					out.Write(m.Output)
				} else {
					g.stdout.Write(m.Output)
				}
				if !m.Done {
					continue
				}
				switch {
				case g.json:
					return g.PrintJSONValue(map[string]any{"project": args[0], "env": req.Env, "previous": before.Msg.Current, "current": m.Current, "output": out.String()})
				case m.Current == before.Msg.Current:
					fmt.Fprintf(g.stdout, "%s still serves %s\n", where, corpusv1.ReleaseName(m.Current))
				default:
					fmt.Fprintf(g.stdout, "%s now serves %s (was %s)\n", where, corpusv1.ReleaseName(m.Current), releaseName(before.Msg.Current))
				}
				return nil
			}
			if err := stream.Err(); err != nil {
				return err
			}
			return fmt.Errorf("the rollback of %s ended without saying it was done; see `corpus release list %s --env %s`", where, args[0], req.Env)
		},
	}
	cmd.Flags().StringVar(&env, "env", "", "the project's environment (needed when it has several)")
	cmd.Flags().StringVar(&to, "to", "", "release to serve, r2 or 2 (default: the newest good one before the current)")
	return cmd
}

// parseRelease reads a release number as users write it: "r3" or "3".
func parseRelease(s string) (uint32, error) {
	n, ok := corpusv1.ParseReleaseName(strings.TrimSpace(s))
	if !ok {
		return 0, fmt.Errorf("release %q: write it as r3 or 3 (see `corpus release list PROJECT`)", s)
	}
	return n, nil
}

// shortCommit is a commit id cut to 12 characters, as git log shows them.
func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// releaseSource is what a release was made from: its commit, or the
// digest of its image (cut as a commit is), "-" when its pull failed.
func releaseSource(r *corpusv1.Release) string {
	if r.Image == "" {
		return dash(shortCommit(r.Commit))
	}
	if r.ImageDigest == "" {
		return "-"
	}
	return "sha256:" + shortCommit(strings.TrimPrefix(r.ImageDigest, "sha256:"))
}

// releaseStatus is a release's status, saying when its tree is gone.
func releaseStatus(r *corpusv1.Release) string {
	if r.Pruned {
		return r.Status + " (pruned)"
	}
	return r.Status
}

// releaseDuration is how long a finished release took, "-" before it ends.
func releaseDuration(r *corpusv1.Release) string {
	if r.StartedAt == nil || r.FinishedAt == nil {
		return "-"
	}
	return formatDuration(r.FinishedAt.AsTime().Sub(r.StartedAt.AsTime()))
}

// formatDuration rounds a duration to what a person reads: milliseconds
// under a second, tenths under a minute, then seconds.
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// releaseTrigger says what made a release, with its config changes (keys
// only): "push", "config +DB ~MODE".
func releaseTrigger(r *corpusv1.Release) string {
	t := r.Trigger
	if t == "" {
		t = "push"
	}
	if len(r.ConfigChanges) > 0 {
		t += " " + strings.Join(r.ConfigChanges, " ")
	}
	return t
}
