package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	corpusv1 "corpus/proto/corpus/v1"
)

// parsePortSpec reads a NAT publication "HOST:GUEST[/PROTO]" or "PORT[/PROTO]".
func parsePortSpec(s string) (*corpusv1.Port, error) {
	spec, proto, _ := strings.Cut(s, "/")
	if proto == "" {
		proto = "tcp"
	}
	host, guest, ok := strings.Cut(spec, ":")
	if !ok {
		guest = host
	}
	hp, err1 := strconv.Atoi(host)
	gp, err2 := strconv.Atoi(guest)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("port %q: want HOST:GUEST[/tcp|udp], e.g. 8080:80/tcp", s)
	}
	return &corpusv1.Port{HostPort: int32(hp), GuestPort: int32(gp), Protocol: proto}, nil
}

func newGuestExposeCmd(g *Globals) *cobra.Command {
	var (
		domain, tcp string
		port        int
		viaProxy    bool
		tlsFlags    routeTLSFlags
	)
	cmd := &cobra.Command{
		Use:   "expose NAME (--proxy --domain DOMAIN [--port PORT] | --tcp NODEPORT[:GUESTPORT])",
		Short: "Route outside traffic to a guest through its node's proxy",
		Example: `  corpus guest expose web --proxy --domain web.example.test --port 80
  corpus guest expose web --domain www.example.com --port 80 --https --redirect --hsts
  corpus guest expose app --domain app.example.test    # the port its OCI image exposes
  corpus guest expose db --tcp 5432`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &corpusv1.CreateRouteRequest{GuestName: args[0]}
			switch {
			case tcp != "" && domain != "":
				return fmt.Errorf("choose --domain (http) or --tcp, not both")
			case tcp != "":
				p, err := parsePortSpec(tcp)
				if err != nil {
					return fmt.Errorf("--tcp: %w", err)
				}
				req.Kind, req.ListenPort, req.GuestPort = string(corpusv1.RouteTCP), p.HostPort, p.GuestPort
			case domain != "":
				if port < 0 {
					return fmt.Errorf("--port %d is not a port", port)
				}
				req.Kind, req.Domain, req.GuestPort = string(corpusv1.RouteHTTP), domain, int32(port)
				req.Https, req.RedirectHttps, req.Hsts = tlsFlags.https, tlsFlags.redirect, tlsFlags.hsts
			default:
				return fmt.Errorf("give --proxy --domain DOMAIN [--port PORT], or --tcp PORT")
			}
			if !viaProxy {
				return fmt.Errorf("routes always go through the node's proxy; to publish a port by NAT use `corpus guest create --port NODEPORT:GUESTPORT`")
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.CreateRouteResponse], error) {
				return c.Ingress.CreateRoute(ctx, connect.NewRequest(req))
			}, func(msg *corpusv1.CreateRouteResponse) error {
				r := msg.Route
				verb := "routed"
				if !msg.Created {
					verb = "already routed"
				}
				fmt.Fprintf(g.stdout, "%s %s to guest %s port %d\n", verb, routeName(r), r.GuestName, r.GuestPort)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&viaProxy, "proxy", true, "route through the node's proxy (http by --domain)")
	f.StringVar(&domain, "domain", "", "HTTP host name to route")
	f.IntVar(&port, "port", 0, "guest port serving the domain (default: the one tcp port the guest's OCI image exposes)")
	f.StringVar(&tcp, "tcp", "", "node port to route raw TCP from, NODEPORT[:GUESTPORT]")
	tlsFlags.add(f)
	return cmd
}

func routeName(r *corpusv1.Route) string {
	if r.Is(corpusv1.RouteHTTP) && r.Https {
		return "https://" + r.Domain
	}
	if r.Is(corpusv1.RouteHTTP) {
		return "http://" + r.Domain
	}
	return fmt.Sprintf("tcp/%d", r.ListenPort)
}

func newIngressCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "ingress", Short: "List and change how outside traffic reaches guests"}
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List every route and NAT port of the cluster and where it points",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListRoutesResponse], error) {
				return c.Ingress.ListRoutes(ctx, connect.NewRequest(&corpusv1.ListRoutesRequest{}))
			}, func(msg *corpusv1.ListRoutesResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "MODE\tFROM\tNODE\tGUEST\tTARGET\tCERTIFICATE")
				for _, v := range msg.Routes {
					fmt.Fprintf(w, "proxy\t%s\t%s\t%s\t%s\t%s\n", routeName(v.Route), nodeAt(v.NodeName, v.NodeAddress), v.Route.GuestName, dash(v.Target), certSummary(v))
				}
				for _, v := range msg.Nat {
					fmt.Fprintf(w, "nat\t%s/%d\t%s\t%s\t%s\t-\n", v.Port.Protocol, v.Port.HostPort, nodeAt(v.NodeName, v.NodeAddress), v.GuestName, dash(v.Target))
				}
				return w.Flush()
			})
		},
	}
	var domain, guest, to string
	var port, toPort int
	del := &cobra.Command{
		Use:   "delete (--domain DOMAIN | --port PORT [--guest NAME])",
		Short: "Delete a route",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.DeleteRouteResponse], error) {
				return c.Ingress.DeleteRoute(ctx, connect.NewRequest(&corpusv1.DeleteRouteRequest{Domain: domain, ListenPort: int32(port), GuestName: guest}))
			}, func(msg *corpusv1.DeleteRouteResponse) error {
				fmt.Fprintf(g.stdout, "deleted route %s\n", routeName(msg.Route))
				return nil
			})
		},
	}
	move := &cobra.Command{
		Use:   "move (--domain DOMAIN | --port PORT [--guest NAME]) --to GUEST [--to-port PORT]",
		Short: "Point a route at another guest at once (in-flight requests finish on the old one)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.MoveRouteResponse], error) {
				return c.Ingress.MoveRoute(ctx, connect.NewRequest(&corpusv1.MoveRouteRequest{
					Domain: domain, ListenPort: int32(port), FromGuest: guest, ToGuest: to, GuestPort: int32(toPort),
				}))
			}, func(msg *corpusv1.MoveRouteResponse) error {
				r := msg.Route
				fmt.Fprintf(g.stdout, "%s now goes to guest %s port %d\n", routeName(r), r.GuestName, r.GuestPort)
				return nil
			})
		},
	}
	for _, c := range []*cobra.Command{del, move} {
		c.Flags().StringVar(&domain, "domain", "", "the http route's domain")
		c.Flags().IntVar(&port, "port", 0, "the tcp route's node port")
		c.Flags().StringVar(&guest, "guest", "", "the guest the tcp route points at (when the port is routed on several nodes)")
	}
	move.Flags().StringVar(&to, "to", "", "guest to point the route at")
	move.Flags().IntVar(&toPort, "to-port", 0, "guest port on the new guest (default: the same)")
	cmd.AddCommand(list, del, move, newIngressTLSCmd(g), newIngressRenewCmd(g), newIngressACMECmd(g))
	return cmd
}

func nodeAt(name, addr string) string {
	switch {
	case name == "":
		return "-"
	case addr == "":
		return name
	}
	return name + " (" + addr + ")"
}
