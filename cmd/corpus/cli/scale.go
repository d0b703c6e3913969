package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	corpusv1 "corpus/proto/corpus/v1"
)

func newScaleCmd(g *Globals) *cobra.Command {
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
proxy balances the environment's domains over every instance's web. A deploy
builds on the first instance while every other one stages the release beside
its old processes, then moves the others' traffic to it --max-parallel
instances at a time (one by default).

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
				return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.GetProjectResponse], error) {
					return c.Projects.GetProject(ctx, connect.NewRequest(&corpusv1.GetProjectRequest{Name: args[0]}))
				}, func(m *corpusv1.GetProjectResponse) error {
					for _, ev := range m.Project.GetEnvs() {
						if env == "" || ev.Name == env {
							printScale(g.stdout, args[0], ev)
						}
					}
					return nil
				})
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ScaleResponse], error) {
				return c.Projects.Scale(ctx, connect.NewRequest(&corpusv1.ScaleRequest{Project: args[0], Env: env, Counts: counts, SharedNothing: sharedNothing, MaxParallel: maxParallel}))
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
	cmd.Flags().Uint32Var(&maxParallel, "max-parallel", 0, "how many instances a deploy switches to the release at once (kept when 0)")
	return cmd
}

// printScale writes an environment's counts and instances, and why the
// scheduler has not placed those that are pending.
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
	for _, in := range ev.Instances {
		if in.PendingReason != "" {
			fmt.Fprintf(out, "instance %d (%s) is pending: %s\n", in.Index, in.GuestName, in.PendingReason)
		}
	}
}

func scaleText(scale map[string]uint32) string {
	if len(scale) == 0 {
		return "every process type on one instance"
	}
	return corpusv1.ScaleText(scale)
}

func newAutoscaleCmd(g *Globals) *cobra.Command {
	var env, targetCPU string
	var minN, maxN uint32
	var targetRPS float64
	var window time.Duration
	var off bool
	cmd := &cobra.Command{
		Use:   "autoscale PROJECT PROCESS --min N --max N (--target-cpu P% | --target-rps R) [--scale-down-window D] | --off",
		Short: "Scale a process type by load, between --min and --max; without flags, show the policy",
		Long: `Scale a process type by load, as the Kubernetes HPA does: every interval
the leader samples the agents (CPU time of the instances' guests, requests
per second of the environment's domains at the proxies) and sets the count
that brings the per-instance figure to the target: ceil(count x load /
target), nothing within 10%. Scale-ups apply at once (at most doubling, or
+4, per step), scale-downs only to the highest count the --scale-down-window
asked for (5m by default), so a steady load does not flap. A scale-out the
nodes cannot take is capped and said so. Every change is in the audit log
(actor autoscaler) with its reason, and the last one in the policy.`,
		Example: `  corpus autoscale site web --env prod --min 2 --max 10 --target-cpu 60%
  corpus autoscale site web --min 1 --max 4 --target-rps 200 --scale-down-window 2m
  corpus autoscale site web --off
  corpus autoscale site web`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			project, process := args[0], args[1]
			set := cmd.Flags().Changed("min") || cmd.Flags().Changed("max") || targetCPU != "" || targetRPS != 0
			if !set && !off {
				return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.GetProjectResponse], error) {
					return c.Projects.GetProject(ctx, connect.NewRequest(&corpusv1.GetProjectRequest{Name: project}))
				}, func(m *corpusv1.GetProjectResponse) error {
					for _, e := range m.Project.GetProject().GetEnvs() {
						if env != "" && e.Name != env {
							continue
						}
						pol := e.Autoscale[process]
						if pol == nil {
							fmt.Fprintf(g.stdout, "%s/%s %s: not autoscaled\n", project, e.Name, process)
							continue
						}
						fmt.Fprintf(g.stdout, "%s/%s %s: %s\n", project, e.Name, process, policyText(pol))
						if pol.LastDecision != "" {
							fmt.Fprintf(g.stdout, "  last decision (%s): %s\n", localTime(pol.LastDecisionAt), pol.LastDecision)
						}
					}
					return nil
				})
			}
			req := &corpusv1.AutoscaleRequest{Project: project, Env: env, Process: process, Min: minN, Max: maxN, TargetRps: targetRPS,
				ScaleDownWindowSeconds: uint32(window / time.Second), Off: off}
			if targetCPU != "" {
				n, err := strconv.ParseUint(strings.TrimSuffix(targetCPU, "%"), 10, 32)
				if err != nil {
					return fmt.Errorf("--target-cpu %q: want a percentage (60%%)", targetCPU)
				}
				req.TargetCpuPercent = uint32(n)
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.AutoscaleResponse], error) {
				return c.Projects.Autoscale(ctx, connect.NewRequest(req))
			}, func(*corpusv1.AutoscaleResponse) error {
				if off {
					fmt.Fprintf(g.stdout, "%s %s is no longer autoscaled; its count stays as it is\n", project, process)
					return nil
				}
				fmt.Fprintf(g.stdout, "%s %s autoscaled: %s\n", project, process, policyText(&corpusv1.AutoscalePolicy{Min: req.Min, Max: req.Max,
					TargetCpuPercent: req.TargetCpuPercent, TargetRps: req.TargetRps, ScaleDownWindowSeconds: req.ScaleDownWindowSeconds}))
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&env, "env", "", "the project's environment (needed when it has several)")
	f.Uint32Var(&minN, "min", 1, "fewest instances")
	f.Uint32Var(&maxN, "max", 0, "most instances")
	f.StringVar(&targetCPU, "target-cpu", "", "mean CPU use of the instances to keep, in percent of each guest's cpus (60%)")
	f.Float64Var(&targetRPS, "target-rps", 0, "requests per second per instance to keep")
	f.DurationVar(&window, "scale-down-window", 0, "how long a lower count must be enough before scaling down (5m when 0)")
	f.BoolVar(&off, "off", false, "stop autoscaling the process type")
	return cmd
}

func policyText(p *corpusv1.AutoscalePolicy) string {
	target := fmt.Sprintf("%d%% cpu", p.TargetCpuPercent)
	if p.TargetRps > 0 {
		target = fmt.Sprintf("%g requests/s", p.TargetRps)
	}
	window := time.Duration(p.ScaleDownWindowSeconds) * time.Second
	if window == 0 {
		window = 5 * time.Minute
	}
	return fmt.Sprintf("%d to %d instances at %s per instance (scale-down window %s)", p.Min, p.Max, target, window)
}
