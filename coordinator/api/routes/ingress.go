// Package routes serves IngressService: routes from outside to guests'
// ports, their TLS, the ACME account and certificate renewals.
package routes

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"corpus/coordinator/api"
	"corpus/coordinator/auth"
	"corpus/coordinator/state"
	"corpus/internal/imageref"
	"corpus/internal/names"
	"corpus/internal/secret"
	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// New returns the handler of IngressService.
func New(b *api.Backend) corpusv1connect.IngressServiceHandler { return &ingressService{b} }

type ingressService struct{ b *api.Backend }

func (s *ingressService) CreateRoute(ctx context.Context, req *connect.Request[corpusv1.CreateRouteRequest]) (*connect.Response[corpusv1.CreateRouteResponse], error) {
	m := req.Msg
	domain := names.NormalizeDomain(m.Domain)
	switch corpusv1.RouteKind(m.Kind) {
	case corpusv1.RouteHTTP:
		if err := names.ValidateDomain(domain); err != nil {
			return nil, api.ToConnect(err)
		}
		if m.ListenPort != 0 {
			return nil, api.ToConnect(api.Invalidf("an http route is chosen by domain; it takes no listen port"))
		}
	case corpusv1.RouteTCP:
		if domain != "" {
			return nil, api.ToConnect(api.Invalidf("a tcp route is chosen by node port; it takes no domain"))
		}
		if err := api.ValidPort("listen port", m.ListenPort); err != nil {
			return nil, api.ToConnect(err)
		}
	default:
		return nil, api.ToConnect(api.Invalidf("route kind %q: use http or tcp", m.Kind))
	}
	if m.GuestPort != 0 || corpusv1.RouteKind(m.Kind) != corpusv1.RouteHTTP {
		if err := api.ValidPort("guest port", m.GuestPort); err != nil {
			return nil, api.ToConnect(err)
		}
	}
	if err := validTLS(corpusv1.RouteKind(m.Kind), m.Https, m.RedirectHttps, m.Hsts); err != nil {
		return nil, api.ToConnect(err)
	}
	if err := names.Validate("guest", m.GuestName); err != nil {
		return nil, api.ToConnect(err)
	}
	view := s.b.Store.Read()
	g := view.GuestByName(m.GuestName)
	if g == nil {
		return nil, api.ToConnect(api.NotFound("guest", m.GuestName, "corpus guest list"))
	}
	if m.GuestPort == 0 {
		p, err := imagePort(g)
		if err != nil {
			return nil, api.ToConnect(err)
		}
		m.GuestPort = p
	}
	// The same route again is a success that changes nothing.
	for _, r := range view.RoutesOfGuest(g.Id) {
		if r.Kind == m.Kind && r.Domain == domain && r.ListenPort == m.ListenPort && r.GuestPort == m.GuestPort &&
			r.Https == m.Https && r.RedirectHttps == m.RedirectHttps && r.Hsts == m.Hsts {
			return connect.NewResponse(&corpusv1.CreateRouteResponse{Route: r}), nil
		}
	}
	if r := view.RouteByDomain(domain); domain != "" && r != nil && r.GuestId == g.Id && r.GuestPort == m.GuestPort {
		// The same route with other TLS settings: change those.
		res, err := s.setTLS(ctx, r, m.Https, m.RedirectHttps, m.Hsts)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(&corpusv1.CreateRouteResponse{Route: res.Route}), nil
	}
	r := &corpusv1.Route{Id: secret.Hex(8), Kind: m.Kind, Domain: domain, ListenPort: m.ListenPort, GuestId: g.Id, GuestPort: m.GuestPort,
		Https: m.Https, RedirectHttps: m.RedirectHttps, Hsts: m.Hsts}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_CreateRoute{CreateRoute: &corpusv1.CreateRoute{Route: r}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.CreateRouteResponse{Route: s.b.Store.Read().Route(r.Id), Created: true}), nil
}

func (s *ingressService) ListRoutes(ctx context.Context, _ *connect.Request[corpusv1.ListRoutesRequest]) (*connect.Response[corpusv1.ListRoutesResponse], error) {
	view := s.b.Store.Read()
	res := &corpusv1.ListRoutesResponse{}
	sc := auth.ScopeOf(view, auth.FromContext(ctx))
	for _, r := range view.Routes() {
		if sc.Route(r) == auth.NoAccess {
			continue
		}
		v := &corpusv1.RouteView{Route: r}
		if g := view.Guest(r.GuestId); g != nil {
			v.GuestAddress = g.Address
			if g.Address != "" {
				v.Target = net.JoinHostPort(g.Address, strconv.Itoa(int(r.GuestPort)))
			}
			if n := view.Node(g.NodeId); n != nil {
				v.NodeName, v.NodeAddress = n.Name, n.Address
			}
		}
		if r.Https {
			v.Certificate = certificateView(view.Certificate(r.Domain))
		}
		res.Routes = append(res.Routes, v)
	}
	for _, g := range view.Guests() {
		if sc.Guest(g) == auth.NoAccess {
			continue
		}
		for _, p := range g.GetSpec().GetPorts() {
			v := &corpusv1.NatView{GuestName: g.Name, Port: p}
			if g.Address != "" {
				v.Target = net.JoinHostPort(g.Address, strconv.Itoa(int(p.GuestPort)))
			}
			if n := view.Node(g.NodeId); n != nil {
				v.NodeName, v.NodeAddress = n.Name, n.Address
			}
			res.Nat = append(res.Nat, v)
		}
	}
	return connect.NewResponse(res), nil
}

// findRoute finds a route by domain, or by listen port (and guest, for
// tcp ports that exist on several nodes).
func findRoute(view *state.Snap, domain string, port int32, guest string) (*corpusv1.Route, error) {
	domain = names.NormalizeDomain(domain)
	if guest != "" {
		if err := names.Validate("guest", guest); err != nil {
			return nil, err
		}
	}
	if domain != "" {
		if err := names.ValidateDomain(domain); err != nil {
			return nil, err
		}
		if r := view.RouteByDomain(domain); r != nil {
			return r, nil
		}
		return nil, api.NotFound("route for domain", domain, "corpus ingress list")
	}
	if port == 0 {
		return nil, api.Invalidf("name the route by --domain or by --port")
	}
	var found []*corpusv1.Route
	for _, r := range view.Routes() {
		if r.Is(corpusv1.RouteTCP) && r.ListenPort == port && (guest == "" || r.GuestName == guest) {
			found = append(found, r)
		}
	}
	switch len(found) {
	case 0:
		return nil, api.NotFound("tcp route on port", strconv.Itoa(int(port)), "corpus ingress list")
	case 1:
		return found[0], nil
	}
	return nil, api.Invalidf("port %d is routed on %d nodes; say which guest's route with --guest", port, len(found))
}

func (s *ingressService) DeleteRoute(ctx context.Context, req *connect.Request[corpusv1.DeleteRouteRequest]) (*connect.Response[corpusv1.DeleteRouteResponse], error) {
	m := req.Msg
	r, err := findRoute(s.b.Store.Read(), m.Domain, m.ListenPort, m.GuestName)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	if _, err := s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_DeleteRoute{DeleteRoute: &corpusv1.DeleteRoute{Id: r.Id}}}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.DeleteRouteResponse{Route: r}), nil
}

func (s *ingressService) MoveRoute(ctx context.Context, req *connect.Request[corpusv1.MoveRouteRequest]) (*connect.Response[corpusv1.MoveRouteResponse], error) {
	m := req.Msg
	if err := names.Validate("guest", m.ToGuest); err != nil {
		return nil, api.ToConnect(err)
	}
	if m.GuestPort != 0 {
		if err := api.ValidPort("guest port", m.GuestPort); err != nil {
			return nil, api.ToConnect(err)
		}
	}
	r, err := findRoute(s.b.Store.Read(), m.Domain, m.ListenPort, m.FromGuest)
	if err != nil {
		return nil, api.ToConnect(err)
	}
	_, err = s.b.Write(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_MoveRoute{MoveRoute: &corpusv1.MoveRoute{
		Id: r.Id, GuestName: m.ToGuest, GuestPort: m.GuestPort,
	}}})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&corpusv1.MoveRouteResponse{Route: s.b.Store.Read().Route(r.Id)}), nil
}

// imagePort is the guest port of an http route asked for without one:
// the one tcp port the guest's image exposes (as Dokku maps an image's
// exposed port, and as docker run -P publishes it).
func imagePort(g *corpusv1.Guest) (int32, error) {
	ports := g.GetObserved().ImageTCPPorts()
	switch {
	case len(ports) == 1:
		return ports[0], nil
	case len(ports) > 1:
		return 0, api.Invalidf("guest %s's image exposes %s: say which port serves the domain (--port)", g.Name, strings.Join(g.GetObserved().GetImagePorts(), ", "))
	case imageref.IsReference(g.GetSpec().GetImage()) && g.GetObserved().GetState() != state.ObservedRunning:
		return 0, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("guest %s has not started from its image yet, so its exposed ports are not known: give --port, or try again once it runs", g.Name))
	default:
		return 0, api.Invalidf("guest %s offers no port to default to (its image exposes no tcp port, it runs no OCI image, or its driver reads none): say which port serves the domain (--port)", g.Name)
	}
}
