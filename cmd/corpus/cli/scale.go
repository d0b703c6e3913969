package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/coordinator/state"
	corpusv1 "corpus/proto/corpus/v1"
)

func newScaleCmd(g *globals) *cobra.Command {
	var env string
	var sharedNothing bool
	var maxParallel uint32
	cmd := &cobra.Command{
		Use:   "scale PROJECT [TYPE=COUNT...] [--env ENV] [--shared-nothing] [--max-parallel N]",
		Short: "Set how many instances run each process type; without counts, show them",
		Long: `Set how many instances run each process type of a project environment.

An environment runs as many guests as its largest count; instance i runs the
process types scaled to i or more, so web=3 worker=1 is three guests, each
running web, the first running worker too. New guests are placed apart
(spread over zones, then nodes), deployed with the serving release, and the
proxy balances the environment's domains over every instance's web. Deploys
then roll through the instances (--max-parallel at a time, one by default).

An environment that keeps data on a volume runs one instance unless
--shared-nothing says each instance may have an empty volume of its own.`,
		Example: `  corpus scale site web=3 worker=1
  corpus scale site --env prod web=5 --max-parallel 2
  corpus scale shop web=2 --shared-nothing
  corpus scale site            # show the counts and the instances`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			counts := map[string]uint32{}
			for _, a := range args[1:] {
				k, v, ok := strings.Cut(a, "=")
				n, err := strconv.ParseUint(v, 10, 32)
				if !ok || k == "" || err != nil {
					return fmt.Errorf("%q is not TYPE=COUNT (web=3)", a)
				}
				if _, dup := counts[k]; dup {
					return fmt.Errorf("%s is given twice", k)
				}
				counts[k] = uint32(n)
			}
			if len(counts) == 0 && !sharedNothing && maxParallel == 0 {
				return call(g, cmd.Context(), func(ctx context.Context, c *clients) (*connect.Response[corpusv1.GetProjectResponse], error) {
					return c.projects.GetProject(ctx, connect.NewRequest(&corpusv1.GetProjectRequest{Name: args[0]}))
				}, func(m *corpusv1.GetProjectResponse) error {
					for _, ev := range m.Project.GetEnvs() {
						if env == "" || ev.Name == env {
							printScale(g.stdout, args[0], ev)
						}
					}
					return nil
				})
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *clients) (*connect.Response[corpusv1.ScaleResponse], error) {
				return c.projects.Scale(ctx, connect.NewRequest(&corpusv1.ScaleRequest{Project: args[0], Env: env, Counts: counts, SharedNothing: sharedNothing, MaxParallel: maxParallel}))
			}, func(m *corpusv1.ScaleResponse) error {
				for _, ev := range m.Project.GetEnvs() {
					if env == "" && len(m.Project.GetEnvs()) == 1 || ev.Name == env {
						if !m.Changed {
							fmt.Fprintf(g.stdout, "%s/%s is already scaled so\n", args[0], ev.Name)
						}
						printScale(g.stdout, args[0], ev)
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&env, "env", "", "the project's environment (needed when it has several)")
	cmd.Flags().BoolVar(&sharedNothing, "shared-nothing", false, "let an environment with a data volume run several instances, each with an empty volume of its own")
	cmd.Flags().Uint32Var(&maxParallel, "max-parallel", 0, "how many instances a deploy rolls at once (kept when 0)")
	return cmd
}

// printScale writes an environment's counts and instances.
func printScale(out io.Writer, project string, ev *corpusv1.ProjectEnvView) {
	fmt.Fprintf(out, "%s/%s: %s\n", project, ev.Name, scaleText(ev.Scale))
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "INSTANCE\tGUEST\tNODE\tSTATUS\tADDRESS\tRELEASE\tPROCESSES")
	for _, in := range ev.Instances {
		rel := releaseName(in.Release)
		if in.Error != "" {
			rel += " (" + in.Error + ")"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", in.Index, in.GuestName, dash(in.NodeName), dash(in.GuestStatus), dash(in.Address), rel, dash(strings.Join(in.Processes, ",")))
	}
	w.Flush()
}

func scaleText(scale map[string]uint32) string {
	if len(scale) == 0 {
		return "every process type on one instance"
	}
	return state.ScaleText(scale)
}
