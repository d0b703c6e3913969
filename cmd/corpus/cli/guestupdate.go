package cli

import (
	"corpus/internal/units"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	corpusv1 "corpus/proto/corpus/v1"
)

func newGuestUpdateCmd(g *Globals) *cobra.Command {
	var (
		image, memory, cpus string
		env, unsetEnv       []string
		ports               []string
		noPorts             bool
	)
	cmd := &cobra.Command{
		Use:   "update NAME [--image IMAGE] [--memory 512M] [--cpus 1] [--env K=V] [--unset-env K] [--port H:G]",
		Short: "Change a guest's image, limits, env or ports in place (drivers that converge, e.g. kubernetes)",
		Long: `Change a guest's image, memory, cpu, environment or ports. Only what is
given changes; --port replaces the whole port list (--no-ports clears it).
The guest's driver applies the change in place (a Kubernetes guest rolls
its Deployment); a guest on a driver that cannot is refused, and is changed
by deleting it and creating it again. The same values again change nothing.`,
		Example: `  corpus guest update api --image registry.example/api:1.3
  corpus guest update api --memory 512M --cpus 1 --env MODE=prod --unset-env DEBUG`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &corpusv1.UpdateGuestRequest{Name: args[0]}
			f := cmd.Flags()
			if f.Changed("image") {
				req.Image = &image
			}
			if f.Changed("memory") {
				b, err := units.ParseSize(memory)
				if err != nil {
					return fmt.Errorf("--memory: %w", err)
				}
				req.MemoryBytes = &b
			}
			if f.Changed("cpus") {
				m, err := units.ParseCPUs(cpus)
				if err != nil {
					return fmt.Errorf("--cpus: %w", err)
				}
				req.CpuMillis = &m
			}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("--env %q: want KEY=VALUE", kv)
				}
				if req.SetEnv == nil {
					req.SetEnv = map[string]string{}
				}
				req.SetEnv[k] = v
			}
			req.UnsetEnv = unsetEnv
			if noPorts && len(ports) > 0 {
				return fmt.Errorf("--no-ports and --port: give one")
			}
			req.ReplacePorts = noPorts || len(ports) > 0
			for _, p := range ports {
				port, err := parsePortSpec(p)
				if err != nil {
					return fmt.Errorf("--port: %w", err)
				}
				req.Ports = append(req.Ports, port)
			}
			if req.Image == nil && req.MemoryBytes == nil && req.CpuMillis == nil && len(req.SetEnv) == 0 && len(req.UnsetEnv) == 0 && !req.ReplacePorts {
				return fmt.Errorf("nothing to change: give --image, --memory, --cpus, --env, --unset-env, --port or --no-ports")
			}
			c, err := g.Clients()
			if err != nil {
				return err
			}
			res, err := c.Guests.UpdateGuest(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(res.Msg)
			}
			if !res.Msg.Changed {
				fmt.Fprintf(g.stdout, "guest %s unchanged (it already has that spec)\n", args[0])
				return nil
			}
			fmt.Fprintf(g.stdout, "guest %s updated; its node applies the new spec (follow it with `corpus guest show %s`)\n", args[0], args[0])
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&image, "image", "", "new image")
	f.StringVar(&memory, "memory", "", "new memory limit, e.g. 512M")
	f.StringVar(&cpus, "cpus", "", "new CPU limit in cores (0.5) or millicores (250m)")
	f.StringArrayVar(&env, "env", nil, "set environment variable KEY=VALUE (repeatable)")
	f.StringArrayVar(&unsetEnv, "unset-env", nil, "remove environment variable KEY (repeatable)")
	f.StringArrayVar(&ports, "port", nil, "the new port list, NODEPORT:GUESTPORT[/tcp|udp] (repeatable; replaces all ports)")
	f.BoolVar(&noPorts, "no-ports", false, "publish no ports any more")
	return cmd
}
