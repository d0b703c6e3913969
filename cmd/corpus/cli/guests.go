package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/client"
	"corpus/internal/units"
	corpusv1 "corpus/proto/corpus/v1"
)

func newGuestCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "guest", Short: "Create, inspect and control guests"}
	cmd.AddCommand(newGuestCreateCmd(g), newGuestListCmd(g), newGuestShowCmd(g), newGuestExecCmd(g), newGuestLogsCmd(g), newGuestExposeCmd(g), newGuestUpdateCmd(g))
	for _, a := range []struct{ verb, desc, want string }{
		{"start", "Start a stopped guest", "running"},
		{"stop", "Stop a running guest (it keeps its place and files)", "stopped"},
		{"delete", "Delete a guest and remove it from its node", ""},
	} {
		cmd.AddCommand(newGuestActionCmd(g, a.verb, a.desc, a.want))
	}
	return cmd
}

func newGuestCreateCmd(g *Globals) *cobra.Command {
	var (
		driver, image, memory, cpus, disk string
		entrypoint                        string
		volSize, volPath, useVolume       string
		env, ports, constraints, packages []string
		stopped, noWait, privileged       bool
		timeout                           time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create NAME --image IMAGE [--memory 256M] [--cpus 0.25] [--entrypoint PROGRAM] [-- ARG...]",
		Short: "Create a guest; the scheduler places it on a node that fits",
		Example: `  corpus guest create web --image busybox --memory 256M --cpus 1
  corpus guest create db --image debian/bookworm --env TZ=UTC --stopped
  corpus guest create py --image debian/bookworm --packages python3,python3-requests
  corpus guest create api --image busybox --constraint region=eu --constraint zone=a
  corpus guest create app --image registry.example/team/app:1.4 --port 8080:8080
  corpus guest create job --image registry.example/team/app:1.4 -- migrate --all
  corpus guest create sh --image registry.example/team/app:1.4 --entrypoint /bin/sh -- -c 'exec app serve'`,
		Long: `Create a guest; the scheduler places it on a node that fits.

An OCI image runs its entrypoint and cmd. Words after -- replace its cmd,
and --entrypoint its entrypoint (which drops the image's cmd unless words
follow --), as docker run's --entrypoint and arguments and a Kubernetes
container's command and args do.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); len(args) > 1 && dash != 1 {
				return fmt.Errorf("unexpected argument %q: the guest's name comes first, and its command's arguments after --", args[1])
			}
			spec := &corpusv1.GuestSpec{Driver: driver, Image: image, Resources: &corpusv1.Resources{}, Env: map[string]string{}, Privileged: privileged, Packages: packages, Args: args[1:]}
			if cmd.Flags().Changed("entrypoint") {
				if entrypoint == "" {
					return fmt.Errorf("--entrypoint \"\": name the program to run instead of the image's entrypoint")
				}
				spec.Command = []string{entrypoint}
			}
			var err error
			if memory != "" {
				if spec.Resources.MemoryBytes, err = units.ParseSize(memory); err != nil {
					return fmt.Errorf("--memory: %w", err)
				}
			}
			if cpus != "" {
				if spec.Resources.CpuMillis, err = units.ParseCPUs(cpus); err != nil {
					return fmt.Errorf("--cpus: %w", err)
				}
			}
			if disk != "" {
				if spec.Resources.DiskBytes, err = units.ParseSize(disk); err != nil {
					return fmt.Errorf("--disk: %w", err)
				}
			}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("--env %q: want KEY=VALUE", kv)
				}
				spec.Env[k] = v
			}
			if len(constraints) > 0 {
				spec.Constraints = map[string]string{}
			}
			for _, kv := range constraints {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" || v == "" {
					return fmt.Errorf("--constraint %q: want LABEL=VALUE, e.g. region=eu or zone=a", kv)
				}
				spec.Constraints[k] = v
			}
			for _, p := range ports {
				port, err := parsePortSpec(p)
				if err != nil {
					return fmt.Errorf("--port: %w", err)
				}
				spec.Ports = append(spec.Ports, port)
			}
			if volSize != "" || useVolume != "" {
				spec.Volume = &corpusv1.VolumeSpec{Path: volPath, UseVolume: useVolume}
				if volSize != "" {
					if spec.Volume.SizeBytes, err = units.ParseSize(volSize); err != nil {
						return fmt.Errorf("--volume: %w", err)
					}
				}
			}
			c, err := g.Clients()
			if err != nil {
				return err
			}
			res, err := c.Guests.CreateGuest(cmd.Context(), connect.NewRequest(&corpusv1.CreateGuestRequest{Name: args[0], Spec: spec, Stopped: stopped}))
			if err != nil {
				return err
			}
			verb := "created"
			if !res.Msg.Created {
				verb = "already exists (same spec), unchanged"
			}
			if !g.json {
				fmt.Fprintf(g.stderr, "guest %s %s\n", args[0], verb)
			}
			want := "running"
			if stopped {
				want = "stopped"
			}
			if noWait {
				if g.json {
					return g.printJSON(res.Msg)
				}
				return nil
			}
			return g.WaitGuest(cmd.Context(), c, args[0], want, 0, timeout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&driver, "driver", "lxc", "driver that runs the guest")
	f.StringVar(&image, "image", "", "image: one the node builds (busybox, debian/bookworm) or an OCI reference REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:DIGEST (lxc)")
	f.StringSliceVar(&packages, "packages", nil, "Debian packages installed into the guest's image (debian images; comma-separated or repeated)")
	f.StringVar(&memory, "memory", "", "memory limit, e.g. 256M (default 256M)")
	f.StringVar(&cpus, "cpus", "", "CPU limit in cores (0.5) or millicores (250m) (default 0.25)")
	f.StringVar(&disk, "disk", "", "disk reserved on the node, e.g. 1G (default 1G)")
	f.StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringArrayVar(&constraints, "constraint", nil, "place only on nodes with this label, LABEL=VALUE, e.g. region=eu, zone=a (repeatable)")
	f.StringArrayVar(&ports, "port", nil, "publish a guest port on the node by NAT, NODEPORT:GUESTPORT[/tcp|udp] (repeatable)")
	f.StringVar(&volSize, "volume", "", "give the guest a new volume of this size, e.g. 5G")
	f.StringVar(&volPath, "volume-path", "", "where the volume appears inside the guest (default /srv/data)")
	f.StringVar(&useVolume, "use-volume", "", "bind an existing unbound volume (on its node) instead")
	f.StringVar(&entrypoint, "entrypoint", "", "run this program instead of the OCI image's entrypoint (its arguments after --)")
	f.BoolVar(&stopped, "stopped", false, "create without starting")
	f.BoolVar(&privileged, "privileged", false, "run an LXC guest without a user namespace: its root is the node's root (ops only; cannot change later)")
	f.BoolVar(&noWait, "detach", false, "return once the guest is accepted, without waiting for it to run")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the guest")
	return cmd
}

// WaitGuest follows a guest until it is in state want ("" = deleted),
// printing its changes, and says how it ended (see followGuest).
func (g *Globals) WaitGuest(ctx context.Context, c *client.Clients, name, want string, index uint64, timeout time.Duration) error {
	m, err := g.followGuest(ctx, c, name, want, index, timeout)
	switch {
	case err != nil:
		return err
	case m == nil:
		if !g.json {
			fmt.Fprintf(g.stderr, "guest %s deleted\n", name)
		}
		return nil
	case g.json:
		return g.printJSON(m)
	}
	fmt.Fprintf(g.stdout, "guest %s is %s on node %s\n", name, want, m.NodeName)
	return nil
}

// followGuest follows a guest with blocking reads, printing each change to
// stderr, until it reaches want ("" = deleted), fails, or cannot be placed.
// It returns the guest as last read, or nil once it is deleted as wanted.
func (g *Globals) followGuest(ctx context.Context, c *client.Clients, name, want string, index uint64, timeout time.Duration) (*corpusv1.GetGuestResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastLine string
	for {
		res, err := c.Guests.GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: name, MinIndex: index, WaitSeconds: 30}))
		if err != nil {
			if pastDeadline(ctx) {
				return nil, fmt.Errorf("timed out after %s waiting for guest %s (see `corpus guest show %s`)", timeout, name, name)
			}
			return nil, err
		}
		m := res.Msg
		if m.Deleted {
			if want == "" {
				return nil, nil
			}
			return nil, fmt.Errorf("guest %s was deleted", name)
		}
		gu := m.Guest
		index = gu.ModifyIndex
		line := m.Status
		if m.NodeName != "" {
			line += " on " + m.NodeName
		}
		if msg := gu.Observed.GetMessage(); msg != "" {
			line += ": " + msg
		}
		if m.Status == "pending" && gu.PendingReason != "" {
			line += ": " + gu.PendingReason
		}
		if line != lastLine && !g.json {
			fmt.Fprintf(g.stderr, "  %s  %s\n", time.Now().Format("15:04:05"), line)
			lastLine = line
		}
		switch {
		case want != "" && m.Status == want:
			return m, nil
		case m.Status == "failed":
			return nil, fmt.Errorf("guest %s failed on node %s: %s (the agent retries; see `corpus guest show %s`)", name, m.NodeName, gu.Observed.GetMessage(), name)
		case m.Status == "pending" && gu.PendingReason != "":
			return nil, fmt.Errorf("guest %s is pending: %s; it is placed as soon as a node fits", name, gu.PendingReason)
		}
	}
}

func newGuestActionCmd(g *Globals, verb, desc, want string) *cobra.Command {
	var (
		noWait, purge bool
		timeout       time.Duration
	)
	cmd := &cobra.Command{
		Use:   verb + " NAME",
		Short: desc,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.Clients()
			if err != nil {
				return err
			}
			req := connect.NewRequest(&corpusv1.GuestActionRequest{Name: args[0], PurgeVolume: purge})
			var res *connect.Response[corpusv1.GuestActionResponse]
			switch verb {
			case "start":
				res, err = c.Guests.StartGuest(cmd.Context(), req)
			case "stop":
				res, err = c.Guests.StopGuest(cmd.Context(), req)
			default:
				res, err = c.Guests.DeleteGuest(cmd.Context(), req)
				if client.Gone(err) {
					return g.goneAlready()
				}
			}
			if err != nil {
				return err
			}
			if noWait {
				if g.json {
					return g.printJSON(res.Msg)
				}
				fmt.Fprintf(g.stdout, "guest %s: %s requested\n", args[0], verb)
				return nil
			}
			// Start from the version the request produced; a deleted guest
			// then reads as deleted rather than not found.
			from := uint64(1)
			if i := res.Msg.Guest.GetModifyIndex(); i > 1 {
				from = i - 1
			}
			return g.WaitGuest(cmd.Context(), c, args[0], want, from, timeout)
		},
	}
	cmd.Flags().BoolVar(&noWait, "detach", false, "return once the request is accepted")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait")
	if verb == "delete" {
		cmd.Flags().BoolVar(&purge, "purge", false, "delete the guest's volume too (it is kept otherwise)")
	}
	return cmd
}

func newGuestListCmd(g *Globals) *cobra.Command {
	var (
		node    string
		orphans bool
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List guests",
		Long: `List guests.

--orphans lists instead the guests nodes run that the cluster does not
know: made after the snapshot the cluster was restored from. Their nodes
keep them running, unmanaged; create them again through the API, or
remove them on their node (docs/operator/backups.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if orphans {
				return g.listOrphans(cmd.Context(), node)
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListGuestsResponse], error) {
				return c.Guests.ListGuests(ctx, connect.NewRequest(&corpusv1.ListGuestsRequest{Node: node}))
			}, func(msg *corpusv1.ListGuestsResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tSTATUS\tDESIRED\tNODE\tADDRESS\tDRIVER\tIMAGE\tMEMORY\tCPUS\tAGE")
				for _, v := range msg.Guests {
					gu := v.Guest
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", gu.Name, v.Status, gu.DesiredState, dash(v.NodeName), dash(gu.Address),
						gu.Spec.GetDriver(), gu.Spec.GetImage(), units.FormatSize(gu.Spec.GetResources().GetMemoryBytes()),
						units.FormatCPUs(gu.Spec.GetResources().GetCpuMillis()), age(gu.CreatedAt.AsTime()))
				}
				return w.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "only guests on this node")
	cmd.Flags().BoolVar(&orphans, "orphans", false, "list the guests nodes run that the cluster does not know (after a restore)")
	return cmd
}

// orphanRow is one guest a node runs that the cluster does not know.
type orphanRow struct {
	Node    string `json:"node"`
	Name    string `json:"name"`
	GuestID string `json:"guest_id"`
}

// listOrphans prints the orphans of every node (or of node).
func (g *Globals) listOrphans(ctx context.Context, node string) error {
	c, err := g.Clients()
	if err != nil {
		return err
	}
	res, err := c.Nodes.ListNodes(ctx, connect.NewRequest(&corpusv1.ListNodesRequest{}))
	if err != nil {
		return err
	}
	rows := []orphanRow{}
	found := node == ""
	for _, v := range res.Msg.Nodes {
		if node != "" && v.Node.GetName() != node {
			continue
		}
		found = true
		for _, o := range v.Node.GetOrphans() {
			rows = append(rows, orphanRow{Node: v.Node.Name, Name: o.Name, GuestID: o.GuestId})
		}
	}
	if !found {
		return fmt.Errorf("node %q: no such node (see corpus node list)", node)
	}
	if g.json {
		return g.PrintJSONValue(map[string]any{"orphans": rows})
	}
	if len(rows) == 0 {
		fmt.Fprintln(g.stdout, "no node runs a guest the cluster does not know")
		return nil
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tNAME\tID")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.Node, r.Name, r.GuestID)
	}
	return w.Flush()
}

func newGuestShowCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a guest's desired and observed state and its events",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.GetGuestResponse], error) {
				return c.Guests.GetGuest(ctx, connect.NewRequest(&corpusv1.GetGuestRequest{Name: args[0]}))
			}, func(msg *corpusv1.GetGuestResponse) error {
				m := msg
				gu := m.Guest
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "Name:\t%s\n", gu.Name)
				fmt.Fprintf(w, "ID:\t%s\n", gu.Id)
				fmt.Fprintf(w, "Status:\t%s\n", m.Status)
				fmt.Fprintf(w, "Desired:\t%s\n", gu.DesiredState)
				fmt.Fprintf(w, "Node:\t%s\n", dash(m.NodeName))
				if gu.PendingReason != "" {
					fmt.Fprintf(w, "Pending:\t%s\n", gu.PendingReason)
				}
				if m.Status == corpusv1.GuestLost {
					fmt.Fprintf(w, "Lost:\t%s\n", lostHint(gu))
				}
				fmt.Fprintf(w, "Driver:\t%s\n", gu.Spec.GetDriver())
				fmt.Fprintf(w, "Image:\t%s\n", gu.Spec.GetImage())
				if c := append(slices.Clone(gu.Spec.GetCommand()), gu.Spec.GetArgs()...); len(c) > 0 {
					what := "Args"
					if len(gu.Spec.GetCommand()) > 0 {
						what = "Command"
					}
					fmt.Fprintf(w, "%s:\t%s\n", what, shellWords(c))
				}
				if p := gu.Spec.GetPackages(); len(p) > 0 {
					fmt.Fprintf(w, "Packages:\t%s\n", strings.Join(p, ", "))
				}
				if gu.Spec.GetPrivileged() {
					fmt.Fprintf(w, "Privileged:\tyes: its root is the node's root\n")
				}
				r := gu.Spec.GetResources()
				fmt.Fprintf(w, "Resources:\tmemory %s, cpus %s, disk %s\n", units.FormatSize(r.GetMemoryBytes()), units.FormatCPUs(r.GetCpuMillis()), units.FormatSize(r.GetDiskBytes()))
				if len(gu.Spec.GetEnv()) > 0 {
					fmt.Fprintf(w, "Env:\t%s\n", labelList(gu.Spec.GetEnv()))
				}
				if len(gu.Spec.GetConstraints()) > 0 {
					fmt.Fprintf(w, "Constraints:\t%s\n", labelList(gu.Spec.GetConstraints()))
				}
				fmt.Fprintf(w, "Address:\t%s\n", dash(gu.Address))
				if gu.IdRange != 0 {
					fmt.Fprintf(w, "ID range:\t%d of its node's (user and group ids of its own)\n", gu.IdRange)
				}
				if v := gu.Spec.GetVolume(); v != nil {
					name := v.UseVolume
					if name == "" {
						name = gu.Name
					}
					fmt.Fprintf(w, "Volume:\t%s at %s\n", name, v.Path)
				}
				for _, p := range gu.Spec.GetPorts() {
					fmt.Fprintf(w, "Port:\tnode %d/%s -> guest %d (nat)\n", p.HostPort, p.Protocol, p.GuestPort)
				}
				fmt.Fprintf(w, "Created:\t%s (%s ago)\n", gu.CreatedAt.AsTime().Local().Format(time.RFC3339), age(gu.CreatedAt.AsTime()))
				printAdmission(w, "", gu.Admission)
				if o := gu.Observed; o != nil {
					fmt.Fprintf(w, "Observed:\t%s", o.State)
					if o.Pid != 0 {
						fmt.Fprintf(w, ", init pid %d", o.Pid)
					}
					if o.Message != "" {
						fmt.Fprintf(w, ", %s", o.Message)
					}
					fmt.Fprintf(w, " (reported %s ago)\n", age(o.UpdatedAt.AsTime()))
					if o.ImageDigest != "" {
						fmt.Fprintf(w, "Image digest:\t%s\n", o.ImageDigest)
					}
					if len(o.ImagePorts) > 0 {
						fmt.Fprintf(w, "Image ports:\t%s\n", strings.Join(o.ImagePorts, ", "))
					}
				}
				fmt.Fprintln(w, "Events:")
				for _, e := range gu.Events {
					fmt.Fprintf(w, "  %s\t%s\t%s\n", localTime(e.Time), e.Type, e.Message)
				}
				return w.Flush()
			})
		},
	}
}

func newGuestExecCmd(g *Globals) *cobra.Command {
	var (
		stdin, tty bool
		env        []string
		dir        string
	)
	cmd := &cobra.Command{
		Use:   "exec NAME [-i] [-t] -- CMD [ARGS...]",
		Short: "Run a command in a running guest; its output and exit code are passed through",
		Long: `Run a command in a running guest. Its output and exit status are passed
through. -i passes this process's stdin to it as it comes; -t runs it on a
terminal (editors, top, Ctrl-C; the local terminal is restored however it
ends). An interactive session is recorded in the audit log when it starts
and ends, never what is typed.`,
		Example: `  corpus guest exec web -- cat /etc/os-release
  corpus guest exec -it web -- sh
  tar c site | corpus guest exec -i web -- tar x -C /srv`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &corpusv1.ExecGuestRequest{Name: args[0], Argv: args[1:], Dir: dir, Env: map[string]string{}}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("--env %q: want KEY=VALUE", kv)
				}
				req.Env[k] = v
			}
			c, err := g.Clients()
			if err != nil {
				return err
			}
			if stdin || tty {
				if tty && g.json {
					return errors.New("--json and -t do not go together: a terminal's output is one stream")
				}
				var keep *shellOut
				if g.json {
					keep = &shellOut{}
				}
				code, err := g.runShell(cmd.Context(), c, req, "", tty, keep)
				if err != nil {
					return err
				}
				if keep != nil {
					if err := g.PrintJSONValue(map[string]any{"exit_code": code, "stdout": keep.stdout.String(), "stderr": keep.stderr.String()}); err != nil {
						return err
					}
				}
				if code != 0 {
					return exitError{code}
				}
				return nil
			}
			stream, err := c.Guests.ExecGuest(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			defer stream.Close()
			var (
				code           int32 = -1
				stdout, stderr strings.Builder
			)
			for stream.Receive() {
				m := stream.Msg()
				if g.json {
					stdout.Write(m.Stdout)
					stderr.Write(m.Stderr)
				} else {
					g.stdout.Write(m.Stdout)
					g.stderr.Write(m.Stderr)
				}
				if m.Exited {
					code = m.ExitCode
				}
			}
			if err := stream.Err(); err != nil {
				return err
			}
			if code < 0 {
				return errors.New("the exec stream ended without an exit code")
			}
			if g.json {
				if err := g.PrintJSONValue(map[string]any{"exit_code": code, "stdout": stdout.String(), "stderr": stderr.String()}); err != nil {
					return err
				}
			}
			if code != 0 {
				return exitError{int(code)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&stdin, "stdin", "i", false, "pass this command's stdin to the guest command as it comes")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "run the command on a terminal (stdin must be one)")
	cmd.Flags().StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE for the command (repeatable)")
	cmd.Flags().StringVar(&dir, "dir", "", "working directory inside the guest")
	return cmd
}

// lostHint says what becomes of a guest whose node is down.
func lostHint(g *corpusv1.Guest) string {
	if v := g.Spec.GetVolume(); v != nil {
		return "its node is down; its data is there, so it stays until the node returns (or, once it is back, move it: delete the guest, `corpus volume move`, create it again with --use-volume)"
	}
	return "its node is down; it moves to another node as soon as one fits"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// localTime prints a timestamp in local time to the second, "-" when unset.
func localTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().Local().Format("2006-01-02 15:04:05")
}

// shellWords prints argv as a shell would take it back: words with
// anything but letters, digits and the characters -_./:=@%+, (comma
// included), in single quotes.
func shellWords(argv []string) string {
	out := make([]string, len(argv))
	for i, w := range argv {
		plain := w != ""
		for _, r := range w {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,", r)) {
				plain = false
				break
			}
		}
		if plain {
			out[i] = w
		} else {
			out[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
