package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	corpusv1 "corpus/proto/corpus/v1"
)

// Project config, processes, restarts and redeploys.

func newConfigCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "A project environment's variables (config and secrets): set, unset, list, get"}
	var env string
	var noRestart, reveal bool
	set := &cobra.Command{
		Use:   "set PROJECT KEY=VALUE... [--env ENV] [--no-restart]",
		Short: "Set variables; a new release of the current commit runs with them (VALUE - reads it from stdin)",
		Example: `  corpus config set site DEBUG=0 WORKERS=4
  printf %s "$PASSWORD" | corpus config set site --env prod DB_PASSWORD=-
  corpus config set site FEATURE_X=on --no-restart`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			vars, err := readVars(cmd, args[1:])
			if err != nil {
				return err
			}
			return followDeploy(g, cmd.Context(), args[0], env, "config change", func(ctx context.Context, c *client.Clients) (*connect.ServerStreamForClient[corpusv1.DeployOutput], error) {
				return c.Projects.SetConfig(ctx, connect.NewRequest(&corpusv1.SetConfigRequest{Project: args[0], Env: env, Set: vars, NoRestart: noRestart}))
			})
		},
	}
	unset := &cobra.Command{
		Use:   "unset PROJECT KEY... [--env ENV] [--no-restart]",
		Short: "Remove variables; a new release of the current commit runs without them",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return followDeploy(g, cmd.Context(), args[0], env, "config change", func(ctx context.Context, c *client.Clients) (*connect.ServerStreamForClient[corpusv1.DeployOutput], error) {
				return c.Projects.SetConfig(ctx, connect.NewRequest(&corpusv1.SetConfigRequest{Project: args[0], Env: env, Unset: args[1:], NoRestart: noRestart}))
			})
		},
	}
	for _, c := range []*cobra.Command{set, unset} {
		c.Flags().BoolVar(&noRestart, "no-restart", false, "store the change for the next deploy instead of deploying now")
	}
	list := &cobra.Command{
		Use:     "list PROJECT [--env ENV] [--reveal]",
		Aliases: []string{"ls"},
		Short:   "List the variables' names (and values with --reveal: ops, or a dev granted the project)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.GetConfigResponse], error) {
				return c.Projects.GetConfig(ctx, connect.NewRequest(&corpusv1.GetConfigRequest{Project: args[0], Env: env, Reveal: reveal}))
			}, func(m *corpusv1.GetConfigResponse) error {
				if len(m.Vars) == 0 {
					fmt.Fprintf(g.stdout, "no config in %s\n", args[0])
					return nil
				}
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				for _, v := range m.Vars {
					val := fmt.Sprintf("(hidden, %d bytes)", v.Bytes)
					if reveal {
						val = v.Value
					}
					fmt.Fprintf(w, "%s\t%s\n", v.Key, val)
				}
				if err := w.Flush(); err != nil {
					return err
				}
				if m.Pending {
					fmt.Fprintf(g.stdout, "(changed since %s started: the next deploy or config change takes it)\n", releaseName(m.CurrentRelease))
				}
				return nil
			})
		},
	}
	list.Flags().BoolVar(&reveal, "reveal", false, "show the values too")
	get := &cobra.Command{
		Use:   "get PROJECT KEY [--env ENV]",
		Short: "Print one variable's value (ops, or a dev granted the project)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.Clients()
			if err != nil {
				return err
			}
			res, err := c.Projects.GetConfig(cmd.Context(), connect.NewRequest(&corpusv1.GetConfigRequest{Project: args[0], Env: env, Reveal: true}))
			if err != nil {
				return err
			}
			for _, v := range res.Msg.Vars {
				if v.Key == args[1] {
					if g.json {
						return g.printJSON(v)
					}
					_, err := fmt.Fprintln(g.stdout, v.Value)
					return err
				}
			}
			return fmt.Errorf("%s has no config key %s (see `corpus config list %s`)", args[0], args[1], args[0])
		},
	}
	cmd.PersistentFlags().StringVar(&env, "env", "", "the project's environment (needed when it has several)")
	cmd.AddCommand(set, unset, list, get)
	return cmd
}

// followDeploy prints a deploy's output as it streams and, with --json,
// one object at the end.
func followDeploy(g *Globals, ctx context.Context, project, env, what string, start func(context.Context, *client.Clients) (*connect.ServerStreamForClient[corpusv1.DeployOutput], error)) error {
	c, err := g.Clients()
	if err != nil {
		return err
	}
	stream, err := start(ctx, c)
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
		if m.Done {
			if g.json {
				return g.PrintJSONValue(map[string]any{"project": project, "env": env, "current": m.Current, "output": out.String()})
			}
			return nil
		}
	}
	if err := stream.Err(); err != nil {
		if g.json && out.Len() > 0 {
			fmt.Fprint(g.stderr, out.String())
		}
		return err
	}
	return fmt.Errorf("the %s of %s ended without saying it was done; see `corpus release list %s`", what, project, project)
}

func newPsCmd(g *Globals) *cobra.Command {
	var env string
	cmd := &cobra.Command{
		Use:   "ps PROJECT [--env ENV]",
		Short: "List a project environment's processes: state, pid, restarts, uptime, release",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListProcessesResponse], error) {
				return c.Projects.ListProcesses(ctx, connect.NewRequest(&corpusv1.ListProcessesRequest{Project: args[0], Env: env}))
			}, func(m *corpusv1.ListProcessesResponse) error {
				if len(m.Processes) == 0 {
					fmt.Fprintf(g.stdout, "no processes run in %s (declare them in a Procfile or processes: in .corpus/corpus.yaml)\n", args[0])
					return nil
				}
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				several := slices.ContainsFunc(m.Processes, func(p *corpusv1.ProcessStatus) bool { return p.Instance > 1 })
				if several {
					fmt.Fprint(w, "INSTANCE\t")
				}
				fmt.Fprintln(w, "PROCESS\tSTATE\tPID\tPORT\tRESTARTS\tUPTIME\tRELEASE\tLAST EXIT\tCOMMAND")
				for _, p := range m.Processes {
					if several {
						fmt.Fprintf(w, "%d (%s)\t", p.Instance, p.Guest)
					}
					up := "-"
					if p.State == "running" && p.StartedAt != nil {
						up = time.Since(p.StartedAt.AsTime()).Truncate(time.Second).String()
					}
					pid, port := "-", "-"
					if p.Pid != 0 {
						pid = fmt.Sprint(p.Pid)
					}
					if p.Port != 0 {
						port = fmt.Sprint(p.Port)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", p.Name, p.State, pid, port, p.Restarts, up, p.Release, dash(p.LastExit), p.Command)
				}
				return w.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&env, "env", "", "the project's environment (needed when it has several)")
	return cmd
}

func newRestartCmd(g *Globals) *cobra.Command {
	var env string
	cmd := &cobra.Command{
		Use:   "restart PROJECT [PROCESS...] [--env ENV]",
		Short: "Restart processes, rolling: new ones beside the old, web checked on its new port, then the old stopped",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return followDeploy(g, cmd.Context(), args[0], env, "restart", func(ctx context.Context, c *client.Clients) (*connect.ServerStreamForClient[corpusv1.DeployOutput], error) {
				return c.Projects.Deploy(ctx, connect.NewRequest(&corpusv1.RedeployRequest{Project: args[0], Env: env, Trigger: "restart", Processes: args[1:]}))
			})
		},
	}
	cmd.Flags().StringVar(&env, "env", "", "the project's environment (needed when it has several)")
	return cmd
}

func newDeployCmd(g *Globals) *cobra.Command {
	var env, strategy, image string
	var only []string
	var keep time.Duration
	cmd := &cobra.Command{
		Use:   "deploy PROJECT [--image REF] [--env ENV] [--only STEP,...] [--strategy rolling|blue-green [--keep D]]",
		Short: "Deploy the current commit (or image) again, or an OCI image, as a new release through the pipeline",
		Long: `Deploy the current commit again as a new release, through the pipeline.

--image REGISTRY/REPO:TAG (or @sha256:DIGEST) makes the release from an OCI
image instead, as dokku git:from-image does: the node pulls it, the release
records the digest the tag resolved to, and the image's entrypoint and cmd
run as the web process (listening on $PORT) with the project's config,
secrets and links as environment. Health check and switch are a push's;
corpus rollback and config changes deploy the recorded digest, never the
tag again.

With several instances (corpus scale) the release rolls through them one at
a time by default. --strategy blue-green starts it beside the serving one on
every instance first, then moves every domain to the new set at once; the
set before keeps running for --keep (1h) so that corpus switch back moves
every domain back at once, with no rebuild.`,
		Example: `  corpus deploy site
  corpus deploy site --image registry.example/team/site:1.4
  corpus deploy site --env prod --only install,fixperms
  corpus deploy site --env prod --strategy blue-green --keep 30m
  corpus switch back site --env prod`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return followDeploy(g, cmd.Context(), args[0], env, "deploy", func(ctx context.Context, c *client.Clients) (*connect.ServerStreamForClient[corpusv1.DeployOutput], error) {
				return c.Projects.Deploy(ctx, connect.NewRequest(&corpusv1.RedeployRequest{Project: args[0], Env: env, Trigger: "deploy", Only: only,
					Strategy: strategy, KeepSeconds: int64(keep / time.Second), Image: image}))
			})
		},
	}
	cmd.Flags().StringVar(&env, "env", "", "the project's environment (needed when it has several)")
	cmd.Flags().StringSliceVar(&only, "only", nil, "run only these steps: archive, install, fixperms, health, notify")
	cmd.Flags().StringVar(&image, "image", "", "make the release from this OCI image (REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:DIGEST)")
	cmd.Flags().StringVar(&strategy, "strategy", "", "rolling (the default) or blue-green")
	cmd.Flags().DurationVar(&keep, "keep", 0, "blue-green: how long the release before stands by for corpus switch back (1h when 0)")
	return cmd
}

func newSwitchCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "switch", Short: "Move an environment's domains between the sets a blue-green deploy left"}
	var env string
	back := &cobra.Command{
		Use:   "back PROJECT [--env ENV]",
		Short: "Move every domain back to the release a blue-green deploy switched away from, at once, while it stands by",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.SwitchBackResponse], error) {
				return c.Projects.SwitchBack(ctx, connect.NewRequest(&corpusv1.SwitchBackRequest{Project: args[0], Env: env}))
			}, func(m *corpusv1.SwitchBackResponse) error {
				fmt.Fprintf(g.stdout, "every domain of %s -> %s (the release before stands by: corpus switch back %s moves them again)\n", args[0], releaseName(m.Current), args[0])
				return nil
			})
		},
	}
	back.Flags().StringVar(&env, "env", "", "the project's environment (needed when it has several)")
	cmd.AddCommand(back)
	return cmd
}
