package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	"corpus/internal/imageref"
	"corpus/internal/units"
	corpusv1 "corpus/proto/corpus/v1"
)

func newProjectCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "project", Short: "Create projects (one guest per environment) that deploy on git push"}
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List projects: each environment's node, guest status, current release and domains",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListProjectsResponse], error) {
				return c.Projects.ListProjects(ctx, connect.NewRequest(&corpusv1.ListProjectsRequest{}))
			}, func(msg *corpusv1.ListProjectsResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tENV\tNODE\tSTATUS\tRELEASE\tDOMAINS")
				for _, v := range msg.Projects {
					if len(v.Envs) == 0 {
						fmt.Fprintf(w, "%s\t-\t-\t-\t-\t-\n", v.Project.GetName())
					}
					for _, e := range v.Envs {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", v.Project.GetName(), e.Name, dash(e.NodeName), dash(e.GuestStatus),
							releaseName(e.CurrentRelease), dash(strings.Join(e.Domains, ",")))
					}
				}
				return w.Flush()
			})
		},
	}
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a project: its members and, per environment, guest, release, domains and git remote",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.GetProjectResponse], error) {
				return c.Projects.GetProject(ctx, connect.NewRequest(&corpusv1.GetProjectRequest{Name: args[0]}))
			}, func(msg *corpusv1.GetProjectResponse) error {
				p := msg.Project.GetProject()
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "Name:\t%s\n", p.GetName())
				fmt.Fprintf(w, "ID:\t%s\n", p.GetId())
				fmt.Fprintf(w, "Members:\t%s (ops users use every project)\n", dash(strings.Join(p.GetMembers(), ", ")))
				fmt.Fprintf(w, "Created:\t%s\n", localTime(p.GetCreatedAt()))
				printAdmission(w, "", p.GetAdmission())
				for _, ev := range msg.Project.GetEnvs() {
					e := corpusv1.EnvNamed(p, ev.Name)
					fmt.Fprintf(w, "Env %s:\n", ev.Name)
					guest := ev.GuestName + ", " + dash(ev.GuestStatus)
					if ev.NodeName != "" {
						guest += " on node " + ev.NodeName
					}
					fmt.Fprintf(w, "  Guest:\t%s\n", guest)
					release := releaseName(ev.CurrentRelease)
					if last := e.GetLastRelease(); last > ev.CurrentRelease {
						release += " (newest " + corpusv1.ReleaseName(last) + ")"
					}
					fmt.Fprintf(w, "  Release:\t%s\n", release)
					if sb := e.GetStandbyRelease(); sb != 0 {
						fmt.Fprintf(w, "  Standing by:\t%s until %s (corpus switch back %s)\n", corpusv1.ReleaseName(sb), localTime(e.GetStandbyUntil()), p.GetName())
					}
					fmt.Fprintf(w, "  Branch:\t%s\n", e.GetBranch())
					domains := "-"
					if len(ev.Domains) > 0 {
						domains = fmt.Sprintf("%s -> guest port %d", strings.Join(ev.Domains, ", "), e.GetHttpPort())
					}
					fmt.Fprintf(w, "  Domains:\t%s\n", domains)
					fmt.Fprintf(w, "  Git remote:\t%s\n", dash(ev.GitRemote))
					if len(ev.Instances) > 1 || len(ev.Scale) > 0 {
						fmt.Fprintf(w, "  Scale:\t%s\n", scaleText(ev.Scale))
						for _, t := range slices.Sorted(maps.Keys(e.GetAutoscale())) {
							fmt.Fprintf(w, "  Autoscale %s:\t%s\n", t, policyText(e.Autoscale[t]))
						}
						for _, in := range ev.Instances {
							fmt.Fprintf(w, "  Instance %d:\t%s, %s on node %s, %s (%s)\n", in.Index, in.GuestName, dash(in.GuestStatus), dash(in.NodeName),
								releaseName(in.Release), dash(strings.Join(in.Processes, ",")))
						}
					}
					if len(ev.Services) > 0 {
						// The environment's guest starts after these.
						fmt.Fprintf(w, "  Depends on:\t%s\n", strings.Join(ev.Services, ", "))
					}
				}
				return w.Flush()
			})
		},
	}
	var delEnv string
	var keepVolumes, yes bool
	del := &cobra.Command{
		Use:   "delete NAME [--env ENV] [--keep-volumes] [--yes]",
		Short: "Delete a project, or one environment of it, with its guests, data volumes and releases (asks first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			what := "project " + args[0]
			if delEnv != "" {
				what = "environment " + delEnv + " of project " + args[0]
			}
			data := "data volumes"
			if keepVolumes {
				data = "releases (its data volumes are kept)"
			}
			if err := g.confirm(cmd, yes, fmt.Sprintf("Delete %s, with its guests and %s", what, data)); err != nil {
				return err
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.DeleteProjectResponse], error) {
				return c.Projects.DeleteProject(ctx, connect.NewRequest(&corpusv1.DeleteProjectRequest{Name: args[0], Env: delEnv, KeepVolumes: keepVolumes}))
			}, func(*corpusv1.DeleteProjectResponse) error {
				what := "project " + args[0]
				if delEnv != "" {
					what += "/" + delEnv
				}
				if keepVolumes {
					fmt.Fprintf(g.stdout, "%s deleted; its guests are being removed, its data volumes kept (corpus volume list)\n", what)
				} else {
					fmt.Fprintf(g.stdout, "%s deleted; its guests and data volumes are being removed\n", what)
				}
				return nil
			})
		},
	}
	del.Flags().StringVar(&delEnv, "env", "", "delete only this environment (dev, staging or prod)")
	del.Flags().BoolVar(&keepVolumes, "keep-volumes", false, "keep the data volumes (unbound) instead of deleting them")
	addYes(del, &yes)
	cmd.AddCommand(newProjectCreateCmd(g), list, show, del, newProjectGrantCmd(g, false), newProjectGrantCmd(g, true),
		newProjectExportCmd(g), newProjectImportCmd(g), newProjectKeygenCmd(g))
	return cmd
}

func newProjectCreateCmd(g *Globals) *cobra.Command {
	var (
		env, image, driver, branch string
		volSize, memory, cpus      string
		disk                       string
		domains, packages          []string
		httpPort                   int
		https                      bool
		detach                     bool
		timeout                    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create NAME [--env dev] [--image busybox] [--domain DOMAIN]...",
		Short: "Create a project environment (its guest NAME-ENV, data volume and domain routes), then print its git remote",
		Example: `  corpus project create hello --domain hello.example.test
  corpus project create hello --env prod --memory 1G --cpus 2 --domain hello.example.com
  corpus project create api --image debian/bookworm --packages python3,python3-flask --domain api.example.test
  corpus project create site --image registry.example/team/site:1.4 --domain site.example.test`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if env == "" {
				env = corpusv1.EnvDev
			}
			if httpPort < 1 || httpPort > 65535 {
				return fmt.Errorf("--http-port %d: want a port from 1 to 65535", httpPort)
			}
			// An OCI reference is the project's first release, deployed
			// once its guest (of the default image) runs.
			var release string
			if imageref.IsReference(image) {
				if detach {
					return fmt.Errorf("--image %s deploys once the guest runs: drop --detach, or create without --image and run corpus deploy %s --image %s", image, args[0], image)
				}
				if _, err := imageref.Parse(image, false); err != nil {
					return err
				}
				release, image = image, "busybox"
			}
			req := &corpusv1.CreateProjectRequest{
				Name: args[0], Env: env, Image: image, Driver: driver, Domains: domains,
				HttpPort: int32(httpPort), Branch: branch, Resources: &corpusv1.Resources{}, Packages: packages, Https: https,
			}
			var err error
			if req.VolumeBytes, err = units.ParseSize(volSize); err != nil {
				return fmt.Errorf("--volume-size: %w", err)
			}
			if memory != "" {
				if req.Resources.MemoryBytes, err = units.ParseSize(memory); err != nil {
					return fmt.Errorf("--memory: %w", err)
				}
			}
			if cpus != "" {
				if req.Resources.CpuMillis, err = units.ParseCPUs(cpus); err != nil {
					return fmt.Errorf("--cpus: %w", err)
				}
			}
			if disk != "" {
				if req.Resources.DiskBytes, err = units.ParseSize(disk); err != nil {
					return fmt.Errorf("--disk: %w", err)
				}
			}
			c, err := g.Clients()
			if err != nil {
				return err
			}
			res, err := c.Projects.CreateProject(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			where := args[0] + "/" + env
			guest := corpusv1.EnvNamed(res.Msg.Project, env).GetGuestName()
			if !g.json {
				verb := "created (guest " + guest + ")"
				if !res.Msg.Created {
					verb = "already exists (same settings), unchanged"
				}
				fmt.Fprintf(g.stderr, "project %s %s\n", where, verb)
			}
			if detach {
				if g.json {
					return g.printJSON(res.Msg)
				}
				if res.Msg.GitRemote != "" {
					fmt.Fprintf(g.stdout, "git remote add %s %s\n", remoteName(env), res.Msg.GitRemote)
				}
				return nil
			}
			if _, err := g.followGuest(cmd.Context(), c, guest, corpusv1.DesiredRunning, 0, timeout); err != nil {
				return err
			}
			if release != "" {
				return followDeploy(g, cmd.Context(), args[0], env, "deploy", func(ctx context.Context, c *client.Clients) (*connect.ServerStreamForClient[corpusv1.DeployOutput], error) {
					return c.Projects.Deploy(ctx, connect.NewRequest(&corpusv1.RedeployRequest{Project: args[0], Env: env, Trigger: "deploy", Image: release}))
				})
			}
			after, err := c.Projects.GetProject(cmd.Context(), connect.NewRequest(&corpusv1.GetProjectRequest{Name: args[0]}))
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(after.Msg)
			}
			var ev *corpusv1.ProjectEnvView
			for _, e := range after.Msg.Project.GetEnvs() {
				if e.Name == env {
					ev = e
				}
			}
			if ev.GetGitRemote() == "" {
				fmt.Fprintf(g.stdout, "project %s is running on node %s, whose agent serves no git endpoint: no git remote yet (see `corpus project show %s`)\n", where, ev.GetNodeName(), args[0])
				return nil
			}
			fmt.Fprintf(g.stdout, "project %s is running on node %s; push %s to deploy:\ngit remote add %s %s\n", where, ev.NodeName, branch, remoteName(env), ev.GitRemote)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&env, "env", corpusv1.EnvDev, "environment: dev, staging or prod (its guest is NAME-ENV)")
	f.StringVar(&image, "image", "busybox", "image of the guest (busybox, debian/bookworm), or an OCI image (REGISTRY/REPO:TAG) deployed as the first release")
	f.StringSliceVar(&packages, "packages", nil, "Debian packages installed into the guest's image (debian images; comma-separated or repeated)")
	f.StringArrayVar(&domains, "domain", nil, "HTTP domain routed to the guest through the proxy (repeatable)")
	f.IntVar(&httpPort, "http-port", 80, "guest port the domains route to")
	f.BoolVar(&https, "https", false, "serve the domains over HTTPS with certificates ordered by ACME (corpus ingress acme set), plain HTTP redirected")
	f.StringVar(&volSize, "volume-size", "1G", "size of the project's data volume")
	f.StringVar(&memory, "memory", "", "memory limit of the guest, e.g. 256M (default 256M)")
	f.StringVar(&cpus, "cpus", "", "CPU limit in cores (0.5) or millicores (500m) (default 0.25)")
	f.StringVar(&disk, "disk", "", "disk of the guest (its root file system: releases, packages), e.g. 4G (default 1G)")
	f.StringVar(&branch, "branch", "main", "git branch whose pushes deploy")
	f.StringVar(&driver, "driver", "lxc", "driver that runs the guest")
	f.BoolVar(&detach, "detach", false, "return once the project is accepted, without waiting for its guest to run")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the guest")
	return cmd
}

// newProjectGrantCmd makes `project grant` and `project revoke`.
func newProjectGrantCmd(g *Globals, revoke bool) *cobra.Command {
	verb, short := "grant", "Let a user (dev or viewer) use a project"
	if revoke {
		verb, short = "revoke", "Take a project away from a user"
	}
	return &cobra.Command{
		Use:   verb + " NAME USER",
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.GrantProjectResponse], error) {
				return c.Projects.GrantProject(ctx, connect.NewRequest(&corpusv1.GrantProjectRequest{Name: args[0], User: args[1], Revoke: revoke}))
			}, func(msg *corpusv1.GrantProjectResponse) error {
				what := "may use"
				if revoke {
					what = "no longer may use"
				}
				fmt.Fprintf(g.stdout, "user %s %s project %s (members: %s)\n", args[1], what, args[0], dash(strings.Join(msg.Project.GetMembers(), ", ")))
				return nil
			})
		},
	}
}

// remoteName is the git remote `project create` suggests for an
// environment: "corpus" for dev, "corpus-prod" for prod.
func remoteName(env string) string {
	if env == corpusv1.EnvDev {
		return "corpus"
	}
	return "corpus-" + env
}

// releaseName prints a release number, "-" for none.
func releaseName(n uint32) string {
	if n == 0 {
		return "-"
	}
	return corpusv1.ReleaseName(n)
}
