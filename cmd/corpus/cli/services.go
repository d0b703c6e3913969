package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	"corpus/internal/units"
	corpusv1 "corpus/proto/corpus/v1"
)

// Services: databases, caches and outside endpoints, linked to projects.

func newServiceCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "service", Aliases: []string{"services", "svc"},
		Short: "Databases, caches and outside endpoints: create from a template, link to projects, back up"}
	cmd.AddCommand(newServiceTemplatesCmd(g), newServiceCreateCmd(g), newServiceListCmd(g), newServiceShowCmd(g),
		newServiceDeleteCmd(g), newServiceActionCmd(g, "start"), newServiceActionCmd(g, "stop"),
		newServiceResizeCmd(g), newServiceUpdateCmd(g), newServiceLinkCmd(g, true), newServiceLinkCmd(g, false))
	cmd.AddCommand(newBackupCmds(g)...)
	return cmd
}

func newServiceTemplatesCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "templates",
		Short: "The templates services are made from (built in, and the operators' own)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListTemplatesResponse], error) {
				return c.Services.ListTemplates(ctx, connect.NewRequest(&corpusv1.ListTemplatesRequest{}))
			}, func(m *corpusv1.ListTemplatesResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "TEMPLATE\tVERSIONS\tPORT\tVOLUME\tMEMORY\tBACKUP\tSOURCE\tDESCRIPTION")
				for _, t := range m.Templates {
					backup := t.BackupFormat
					if backup == "" {
						backup = "-"
					}
					fmt.Fprintf(w, "%s\t%s\t%d\t%s (min %s)\t%s (min %s)\t%s\t%s\t%s\n", t.Name, strings.Join(t.Versions, ","), t.Port,
						units.FormatSize(t.DefaultVolumeBytes), units.FormatSize(t.MinVolumeBytes),
						units.FormatSize(t.DefaultMemoryBytes), units.FormatSize(t.MinMemoryBytes), backup, t.Source, t.Description)
				}
				return w.Flush()
			})
		},
	}
}

func newServiceCreateCmd(g *Globals) *cobra.Command {
	var template, version, size, memory, env, driver, external, schedule, project string
	var keep uint32
	var secrets []string
	cmd := &cobra.Command{
		Use:   "create NAME --project PROJECT (--template T [--version V] [--size 5G] [--memory 512M] | --external URL [--secret KEY=VALUE...])",
		Short: "Make a service: a guest of its own with a volume and generated credentials, or an outside endpoint",
		Long: `Make a service: a guest of its own with a volume and generated credentials, or an outside endpoint.

It belongs to --project: the users granted the project see it, and its devs
link, act on and delete it. Devs make services only in projects granted to
them; a service of no project (ops may leave --project out) is the operators'.`,
		Example: `  corpus service create db --project site --template postgresql --size 5G --env prod
  corpus service create cache --project site --template redis --backup-schedule daily --keep 7
  corpus service create pay --project site --external https://api.example.com --secret API_KEY=-`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &corpusv1.CreateServiceRequest{Name: args[0], Template: template, Version: version, Env: env, Driver: driver,
				ExternalUrl: external, BackupSchedule: schedule, BackupKeep: keep, Project: project}
			var err error
			if size != "" {
				if req.SizeBytes, err = units.ParseSize(size); err != nil {
					return err
				}
			}
			if memory != "" {
				if req.MemoryBytes, err = units.ParseSize(memory); err != nil {
					return err
				}
			}
			if req.Secrets, err = readVars(cmd, secrets); err != nil {
				return err
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.CreateServiceResponse], error) {
				return c.Services.CreateService(ctx, connect.NewRequest(req))
			}, func(m *corpusv1.CreateServiceResponse) error {
				verb := "exists already"
				if m.Created {
					verb = "created"
				}
				fmt.Fprintf(g.stdout, "service %s %s\n", args[0], verb)
				printService(g, m.Service)
				fmt.Fprintf(g.stdout, "link it to a project with: corpus service link %s %s [--env ENV]\n", args[0], orValue(project, "PROJECT"))
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&project, "project", "", "the project it belongs to (required of devs: one granted to them)")
	f.StringVar(&template, "template", "", "the template (corpus service templates)")
	f.StringVar(&version, "version", "", "the template's version (its default when empty)")
	f.StringVar(&size, "size", "", "the volume's size (the template's default when empty)")
	f.StringVar(&memory, "memory", "", "the memory limit (the template's default when empty)")
	f.StringVar(&env, "env", "", "dev (default), staging or prod: the node mode it runs on")
	f.StringVar(&driver, "driver", "", "the guest's driver (lxc, libvirt, kubernetes; the scheduler's choice when empty)")
	f.StringVar(&external, "external", "", "an outside endpoint's URL: no guest, only the link")
	f.StringArrayVar(&secrets, "secret", nil, "KEY=VALUE an external service gives its links (VALUE - reads stdin)")
	f.StringVar(&schedule, "backup-schedule", "", "take backups hourly, daily or weekly")
	f.Uint32Var(&keep, "keep", 0, "how many scheduled backups to keep (7 by default)")
	return cmd
}

// readVars reads KEY=VALUE arguments; one VALUE may be - (stdin, read
// whole: a value over the API's limit is refused here, saying its size,
// before anything is sent).
func readVars(cmd *cobra.Command, args []string) (map[string]string, error) {
	if len(args) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	stdin := false
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not KEY=VALUE", a)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s is given twice", k)
		}
		if v == "-" {
			if stdin {
				return nil, fmt.Errorf("only one value can come from stdin")
			}
			stdin = true
			var err error
			if v, err = readStdinValue(cmd.InOrStdin(), k); err != nil {
				return nil, err
			}
		}
		out[k] = v
	}
	return out, nil
}

// maxStdinCount bounds how much of an over-long value readStdinValue
// reads to say its size.
const maxStdinCount = 1 << 30

// readStdinValue reads the value of key from r, without one final
// newline, refusing one longer than corpusv1.MaxConfigValueBytes.
func readStdinValue(r io.Reader, key string) (string, error) {
	// The limit, a newline after it, and one byte more to know it is over.
	b, err := io.ReadAll(io.LimitReader(r, corpusv1.MaxConfigValueBytes+2))
	if err != nil {
		return "", fmt.Errorf("reading %s from stdin: %w", key, err)
	}
	v := strings.TrimSuffix(string(b), "\n")
	if len(v) <= corpusv1.MaxConfigValueBytes {
		return v, nil
	}
	rest, err := io.Copy(io.Discard, io.LimitReader(r, maxStdinCount))
	if err != nil {
		return "", fmt.Errorf("reading %s from stdin: %w", key, err)
	}
	size := "is " + units.FormatSize(int64(len(b))+rest)
	if int64(len(b))+rest >= maxStdinCount {
		size = "is over " + units.FormatSize(maxStdinCount)
	}
	return "", fmt.Errorf("the value of %s on stdin %s; the limit is %s", key, size, units.FormatSize(corpusv1.MaxConfigValueBytes))
}

// printService prints a service's view for people.
func printService(g *Globals, v *corpusv1.ServiceView) {
	s := v.Service
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	if s.ExternalUrl != "" {
		fmt.Fprintf(w, "endpoint\t%s\n", s.ExternalUrl)
	} else {
		fmt.Fprintf(w, "template\t%s %s\n", s.Template, s.Version)
		fmt.Fprintf(w, "guest\t%s (%s) on %s, address %s, port %d\n", s.GuestName, orDash(v.GuestStatus), orDash(v.NodeName), orDash(v.Address), s.TemplateSpec.GetPort())
	}
	state := s.Observed.GetState()
	if state == "" {
		state = "unknown"
	}
	if msg := s.Observed.GetMessage(); msg != "" {
		state += ": " + msg
	}
	fmt.Fprintf(w, "state\t%s (desired %s)\n", state, s.DesiredState)
	fmt.Fprintf(w, "project\t%s\n", orValue(s.Project, "none (operators' only)"))
	fmt.Fprintf(w, "env\t%s\n", s.Env)
	if len(v.SecretKeys) > 0 {
		fmt.Fprintf(w, "secrets\t%s (hidden)\n", strings.Join(v.SecretKeys, " "))
	}
	var links []string
	for _, l := range s.Links {
		links = append(links, fmt.Sprintf("%s/%s as %s", l.Project, l.Env, l.As))
	}
	if len(links) == 0 {
		links = []string{"-"}
	}
	fmt.Fprintf(w, "linked to\t%s\n", strings.Join(links, ", "))
	if s.GuestId != "" {
		sched := s.BackupSchedule
		if sched == "" {
			sched = "none"
		} else {
			sched += fmt.Sprintf(", keeping %d", max(s.BackupKeep, 1))
		}
		last := "never"
		if b := v.LastBackup; b != nil {
			last = fmt.Sprintf("%s, %s ago (%s)", b.Id, age(b.FinishedAt.AsTime()), units.FormatSize(b.SizeBytes))
		}
		fmt.Fprintf(w, "backups\tschedule %s; last %s\n", sched, last)
	}
	for _, c := range v.Service.GetAdmission() {
		fmt.Fprintf(w, "set by %s\t%s = %s\n", c.Extension, c.Field, dash(c.Value))
	}
	w.Flush()
}

func orDash(s string) string { return orValue(s, "-") }

// orValue is s, or def when s is empty.
func orValue(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func newServiceListCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the services you may use",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListServicesResponse], error) {
				return c.Services.ListServices(ctx, connect.NewRequest(&corpusv1.ListServicesRequest{}))
			}, func(m *corpusv1.ListServicesResponse) error {
				if len(m.Services) == 0 {
					fmt.Fprintln(g.stdout, "no services (corpus service create NAME --template T)")
					return nil
				}
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tPROJECT\tKIND\tSTATE\tNODE\tADDRESS\tLINKS\tLAST BACKUP")
				for _, v := range m.Services {
					s := v.Service
					kind := s.Template + " " + s.Version
					if s.ExternalUrl != "" {
						kind = "external"
					}
					last := "-"
					if v.LastBackup != nil {
						last = age(v.LastBackup.FinishedAt.AsTime()) + " ago"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.Name, orDash(s.Project), kind, orDash(s.Observed.GetState()), orDash(v.NodeName), orDash(v.Address), len(s.Links), last)
				}
				return w.Flush()
			})
		},
	}
}

func newServiceShowCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a service: where it runs, how it is, its links and backups",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.GetServiceResponse], error) {
				return c.Services.GetService(ctx, connect.NewRequest(&corpusv1.GetServiceRequest{Name: args[0]}))
			}, func(m *corpusv1.GetServiceResponse) error {
				fmt.Fprintf(g.stdout, "service %s\n", args[0])
				printService(g, m.Service)
				return nil
			})
		},
	}
}

func newServiceDeleteCmd(g *Globals) *cobra.Command {
	var purge, yes bool
	cmd := &cobra.Command{
		Use:   "delete NAME [--purge] [--yes]",
		Short: "Delete a service (refused while linked); its volume and backups stay unless --purge (asks first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			question := "Delete service " + args[0] + " (its volume and backups are kept)"
			if purge {
				question = "Delete service " + args[0] + " with its data volume and its backups"
			}
			if err := g.confirm(cmd, yes, question); err != nil {
				return err
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.DeleteServiceResponse], error) {
				return c.Services.DeleteService(ctx, connect.NewRequest(&corpusv1.DeleteServiceRequest{Name: args[0], Purge: purge}))
			}, func(m *corpusv1.DeleteServiceResponse) error {
				what := "its volume and backups are kept"
				if purge {
					what = "its volume and backups go with it"
				}
				_, err := fmt.Fprintf(g.stdout, "service %s deleted; %s\n", args[0], what)
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "delete its data volume and its backups too")
	addYes(cmd, &yes)
	return cmd
}

func newServiceActionCmd(g *Globals, verb string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " NAME",
		Short: strings.ToUpper(verb[:1]) + verb[1:] + " a service's guest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ServiceActionResponse], error) {
				req := connect.NewRequest(&corpusv1.ServiceActionRequest{Name: args[0]})
				if verb == "start" {
					return c.Services.StartService(ctx, req)
				}
				return c.Services.StopService(ctx, req)
			}, func(m *corpusv1.ServiceActionResponse) error {
				state := map[string]string{"start": "running", "stop": "stopped"}[verb]
				if !m.Changed {
					_, err := fmt.Fprintf(g.stdout, "service %s is %s already\n", args[0], state)
					return err
				}
				_, err := fmt.Fprintf(g.stdout, "service %s: desired %s\n", args[0], state)
				return err
			})
		},
	}
}

func newServiceResizeCmd(g *Globals) *cobra.Command {
	var size, memory string
	cmd := &cobra.Command{
		Use:   "resize NAME [--size 10G] [--memory 1G]",
		Short: "Change a service's volume size (smaller only when its data fits) and memory",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &corpusv1.ResizeServiceRequest{Name: args[0]}
			var err error
			if size != "" {
				if req.SizeBytes, err = units.ParseSize(size); err != nil {
					return err
				}
			}
			if memory != "" {
				if req.MemoryBytes, err = units.ParseSize(memory); err != nil {
					return err
				}
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ServiceActionResponse], error) {
				return c.Services.ResizeService(ctx, connect.NewRequest(req))
			}, func(m *corpusv1.ServiceActionResponse) error {
				if !m.Changed {
					_, err := fmt.Fprintf(g.stdout, "service %s has that size already\n", args[0])
					return err
				}
				printService(g, m.Service)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&size, "size", "", "the volume's new size")
	cmd.Flags().StringVar(&memory, "memory", "", "the new memory limit")
	return cmd
}

func newServiceUpdateCmd(g *Globals) *cobra.Command {
	var schedule string
	var keep uint32
	cmd := &cobra.Command{
		Use:   "update NAME [--backup-schedule hourly|daily|weekly|none] [--keep N]",
		Short: "Change when a service's backups are taken and how many are kept",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ServiceActionResponse], error) {
				return c.Services.UpdateService(ctx, connect.NewRequest(&corpusv1.UpdateServiceRequest{Name: args[0], BackupSchedule: schedule, BackupKeep: keep}))
			}, func(m *corpusv1.ServiceActionResponse) error {
				printService(g, m.Service)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&schedule, "backup-schedule", "", "hourly, daily, weekly, or none")
	cmd.Flags().Uint32Var(&keep, "keep", 0, "how many scheduled backups to keep")
	return cmd
}

func newServiceLinkCmd(g *Globals, link bool) *cobra.Command {
	var env, as string
	var noRestart bool
	use, short := "link SERVICE PROJECT [--env ENV] [--as NAME]", "Give a project environment the service's variables (NAME_URL, ...) and network reach to it; a new release runs with them"
	if !link {
		use, short = "unlink SERVICE PROJECT [--env ENV]", "Take the service's variables and reach away from a project environment; a new release runs without them"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			what := "link"
			if !link {
				what = "unlink"
			}
			return followDeploy(g, cmd.Context(), args[1], env, what, func(ctx context.Context, c *client.Clients) (*connect.ServerStreamForClient[corpusv1.DeployOutput], error) {
				if link {
					return c.Services.LinkService(ctx, connect.NewRequest(&corpusv1.LinkServiceRequest{Service: args[0], Project: args[1], Env: env, As: as, NoRestart: noRestart}))
				}
				return c.Services.UnlinkService(ctx, connect.NewRequest(&corpusv1.UnlinkServiceRequest{Service: args[0], Project: args[1], Env: env, NoRestart: noRestart}))
			})
		},
	}
	cmd.Flags().StringVar(&env, "env", "", "the project's environment (needed when it has several)")
	cmd.Flags().BoolVar(&noRestart, "no-restart", false, "store the change for the next deploy instead of deploying now")
	if link {
		cmd.Flags().StringVar(&as, "as", "", "the variables' prefix (DATABASE gives DATABASE_URL; the template's name by default)")
	}
	return cmd
}

// backupLine is one backup for people.
func backupLine(b *corpusv1.Backup, node string) string {
	when := "-"
	if b.FinishedAt != nil {
		when = b.FinishedAt.AsTime().Local().Format(time.DateTime)
	} else if b.StartedAt != nil {
		when = b.StartedAt.AsTime().Local().Format(time.DateTime)
	}
	status := b.Status
	if b.Message != "" {
		status += ": " + b.Message
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", b.Id, backupOf(b), when, units.FormatSize(b.SizeBytes), orDash(node), b.Trigger, status)
}

// backupOf names what a backup is of: a service, or "volume NAME".
func backupOf(b *corpusv1.Backup) string {
	if b.Volume != "" {
		return "volume " + b.Volume
	}
	return b.Service
}

// sortedBackups sorts backups newest first.
func sortedBackups(bs []*corpusv1.BackupView) {
	slices.SortStableFunc(bs, func(a, b *corpusv1.BackupView) int { return int(b.Backup.CreateIndex) - int(a.Backup.CreateIndex) })
}
