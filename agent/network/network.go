package network

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"corpus/dns"
	"corpus/drivers"
	"corpus/internal/version"
	"corpus/netns"
	"corpus/netns/l2filter"
	"corpus/netns/nat"
	"corpus/netns/proxy"
	"corpus/netns/proxy/proxyd"
	corpusv1 "corpus/proto/corpus/v1"
)

// Config configures a node's network.
type Config struct {
	// StateDir holds the proxy process's folder (proxy/).
	StateDir string
	// Bridge is the name of the bridge guests join.
	Bridge string
	// ProxyOnly runs the proxy alone: no bridge, NAT or resolver (an
	// agent whose drivers reach guests their own way).
	ProxyOnly bool
	// ProxyHTTPAddr and ProxyHTTPSAddr are the proxy's listen addresses
	// (HTTPS off when empty); ProxyCerts are "CERT.pem:KEY.pem" pairs.
	ProxyHTTPAddr  string
	ProxyHTTPSAddr string
	ProxyCerts     []string
	// ProxyProcess runs the proxy as a process of its own, ProxyBinary
	// (default: this one); ProxyMetrics is given its metrics.
	ProxyProcess bool
	ProxyBinary  string
	ProxyMetrics func(prometheus.Gatherer)
	Metrics      prometheus.Registerer
	Logger       *slog.Logger
}

// Network is the agent's side of guest networking: the bridge its guests
// join, the layer-2 filter that holds each guest to its MAC and address,
// the NAT rules that publish their ports, and the proxy in front of their
// routes. All are recomputed from the desired state on every reconcile
// pass and made true on the host (level-based): a bridge, a chain or a
// table removed by hand comes back on the next pass.
type Network struct {
	bridge string
	// proxyOnly networks run the proxy alone: no bridge, NAT or
	// resolver (an agent whose drivers reach guests their own way).
	proxyOnly bool
	host      *netns.Host
	l2        *l2filter.Filter
	nat       *nat.NAT
	proxy     Ingress
	logger    *slog.Logger

	// resolver answers guests on the bridge address: the cluster zone by
	// asking a coordinator, everything else upstream. resolverKey says
	// what it was started for; a change restarts it.
	resolver    *dns.Resolver
	resolverKey string

	mu      sync.Mutex
	lastErr error // the last reconcile's error
}

// Ingress is the node's proxy: in the agent (*proxy.Proxy) or a process
// of its own (*proxyd.Client).
type Ingress interface {
	SetRoutes(proxy.Routes) error
	Routes() proxy.Routes
	InFlight(target string) int64
	// Requests counts the requests answered by route host.
	Requests() map[string]uint64
	Errors() map[string]uint64
	HTTPAddr() net.Addr
	HTTPSAddr() net.Addr
	Certificates() []*x509.Certificate
	// Run serves (in the agent) or watches over the process until ctx
	// ends.
	Run(ctx context.Context) error
}

// ClusterDNS is where the cluster zone is answered, as the watch said.
type ClusterDNS struct {
	Zone   string // fully qualified
	Server string // host:port of a coordinator's DNS
}

// New builds the node's network parts and adopts or starts its proxy;
// ctx ending stops the wait for a proxy process to answer.
func New(ctx context.Context, cfg Config) (*Network, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	n := &Network{bridge: cfg.Bridge, proxyOnly: cfg.ProxyOnly, logger: cfg.Logger}
	var err error
	if !cfg.ProxyOnly {
		n.host = netns.New(netns.Config{Logger: cfg.Logger})
		if n.l2, err = l2filter.New(l2filter.Config{PortPrefix: hostInterfacePrefix, Logger: cfg.Logger}); err != nil {
			return nil, fmt.Errorf("layer-2 filter: %w", err)
		}
		if n.nat, err = nat.New(nat.Config{Logger: cfg.Logger}); err != nil {
			return nil, fmt.Errorf("nat: %w", err)
		}
	}
	pc := proxy.Config{HTTPAddr: cfg.ProxyHTTPAddr, HTTPSAddr: cfg.ProxyHTTPSAddr, Logger: cfg.Logger, Metrics: cfg.Metrics}
	for _, pair := range cfg.ProxyCerts {
		cert, key, ok := strings.Cut(pair, ":")
		if !ok {
			return nil, fmt.Errorf("proxy certificate %q: want CERT.pem:KEY.pem", pair)
		}
		pc.Certs = append(pc.Certs, proxy.CertFiles{CertFile: cert, KeyFile: key})
	}
	if cfg.ProxyProcess {
		if n.proxy, err = proxyProcess(ctx, cfg, pc); err != nil {
			return nil, fmt.Errorf("the proxy process: %w", err)
		}
		return n, nil
	}
	if n.proxy, err = proxy.New(pc); err != nil {
		return nil, fmt.Errorf("starting the proxy: %w", err)
	}
	return n, nil
}

// Remove removes the node's bridge, layer-2 filter and NAT rules and
// stops its proxy process (for `corpus dev --cleanup` and uninstall).
// Guests still attached lose their network.
func (n *Network) Remove(ctx context.Context) error {
	var errs []error
	if p, ok := n.proxy.(interface{ Stop() error }); ok {
		errs = append(errs, p.Stop()) // the proxy process, which outlives agents otherwise
	}
	if !n.proxyOnly {
		_, rerr := n.host.EnsureRoutes(ctx, nil) // the routes to other nodes' guests
		errs = append(errs, n.nat.Remove(ctx), n.l2.Remove(ctx), n.host.DeleteBridge(ctx, n.bridge), rerr)
	}
	return errors.Join(errs...)
}

// Shutdown stops the guests' resolver, if one runs.
func (n *Network) Shutdown(ctx context.Context) {
	if n.resolver != nil {
		n.resolver.Shutdown(ctx)
	}
}

// proxyProcess adopts the node's proxy process, or starts one (`corpus
// proxy` with the agent's proxy settings), in <state>/proxy.
func proxyProcess(ctx context.Context, cfg Config, pc proxy.Config) (*proxyd.Client, error) {
	bin := cfg.ProxyBinary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	dir := filepath.Join(cfg.StateDir, "proxy")
	args := []string{"proxy", "--dir", dir, "--http-addr", pc.HTTPAddr, "--https-addr", pc.HTTPSAddr}
	for _, c := range pc.Certs {
		args = append(args, "--cert", c.CertFile+":"+c.KeyFile)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := proxyd.NewClient(ctx, proxyd.ClientConfig{
		Dir: dir, Binary: bin, Args: args, Version: version.Get().String(),
		HTTPAddr: pc.HTTPAddr, HTTPSAddr: pc.HTTPSAddr, Certs: pc.Certs, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	if cfg.ProxyMetrics != nil {
		cfg.ProxyMetrics(prometheus.GathererFunc(c.Gather))
	}
	return c, nil
}

// Proxy is the node's proxy.
func (n *Network) Proxy() Ingress { return n.proxy }

// ReservedPorts are the node ports the proxy listens on.
func (n *Network) ReservedPorts() []int32 {
	var out []int32
	for _, a := range []net.Addr{n.proxy.HTTPAddr(), n.proxy.HTTPSAddr()} {
		if ta, ok := a.(*net.TCPAddr); ok {
			out = append(out, int32(ta.Port))
		}
	}
	return out
}

// gateway is the bridge's address in the node's guest subnet.
func gateway(node *corpusv1.Node) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(node.GetGuestSubnet())
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("node has no guest subnet yet")
	}
	return netip.PrefixFrom(p.Masked().Addr().Next(), p.Bits()), nil
}

// guestNetwork is where a guest sits on the node's network.
func (n *Network) guestNetwork(node *corpusv1.Node, g *corpusv1.Guest) (*drivers.Network, error) {
	gw, err := gateway(node)
	if err != nil {
		return nil, err
	}
	addr, err := netip.ParseAddr(g.Address)
	if err != nil {
		return nil, fmt.Errorf("guest %s has no address yet", g.Name)
	}
	return &drivers.Network{
		Bridge:        n.bridge,
		Address:       netip.PrefixFrom(addr, gw.Bits()),
		Gateway:       gw.Addr(),
		MAC:           guestMAC(g.Id).String(),
		HostInterface: hostInterface(g.Id),
		Nameservers:   []netip.Addr{gw.Addr()},
	}, nil
}

// ensureResolver runs the guests' resolver on the bridge address, started
// (or restarted) for the current cluster DNS. Without cluster DNS there
// is nothing to answer the zone with, and guests keep their image's
// resolver configuration.
func (n *Network) ensureResolver(gw netip.Addr, c ClusterDNS) error {
	key := gw.String() + "|" + c.Server + "|" + c.Zone
	if c.Server == "" || key == n.resolverKey {
		return nil
	}
	if n.resolver != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		n.resolver.Shutdown(ctx)
		cancel()
		n.resolver, n.resolverKey = nil, ""
	}
	cluster := &dns.Forwarder{Upstreams: []string{c.Server}}
	cfg := dns.ResolverConfig{Addr: net.JoinHostPort(gw.String(), "53"), Zone: c.Zone, CacheSize: 4096}
	r, err := dns.NewResolver(cfg, cluster, n.logger)
	if errors.Is(err, dns.ErrNoUpstream) {
		// No upstream on this host: names outside the cluster zone go to
		// the coordinator too, which refuses them.
		cfg.Upstreams = []string{c.Server}
		r, err = dns.NewResolver(cfg, cluster, n.logger)
	}
	if err != nil {
		return fmt.Errorf("guest resolver: %w", err)
	}
	if err := r.Start(); err != nil {
		return fmt.Errorf("guest resolver on %s: %w", cfg.Addr, err)
	}
	n.resolver, n.resolverKey = r, key
	n.logger.Info("guest resolver listening", "addr", cfg.Addr, "zone", c.Zone, "cluster_dns", c.Server)
	return nil
}

// search is the guests' resolver search list for a zone.
func search(zone string) []string {
	z := strings.TrimSuffix(zone, ".")
	if z == "" {
		return nil
	}
	return []string{"guest." + z, z}
}

// guestMAC derives a stable, locally administered unicast MAC from the
// guest id, so a recreated guest keeps its MAC (and neighbours' caches).
func guestMAC(id string) net.HardwareAddr {
	sum := sha256.Sum256([]byte(id))
	return net.HardwareAddr{0x02, sum[0], sum[1], sum[2], sum[3], sum[4]}
}

// hostInterfacePrefix starts the name of every guest's host interface:
// the layer-2 filter drops frames from such a port it was not told of.
const hostInterfacePrefix = "cg"

// hostInterface names the node's end of a guest's veth (15 bytes at most).
func hostInterface(id string) string {
	if len(id) > 12 {
		id = id[:12]
	}
	return hostInterfacePrefix + id
}

// GuestNetwork returns where guest g sits on the network of node (as
// last told), with the cluster zone cdns in its search list, making
// sure the bridge it joins exists first.
func (n *Network) GuestNetwork(ctx context.Context, node *corpusv1.Node, cdns ClusterDNS, g *corpusv1.Guest) (*drivers.Network, error) {
	gn, err := n.guestNetwork(node, g)
	if err != nil {
		return nil, fmt.Errorf("network of guest: %w", err)
	}
	gn.Search = search(cdns.Zone)
	if _, err := n.host.EnsureBridge(ctx, netns.Bridge{Name: gn.Bridge, Gateway: netip.PrefixFrom(gn.Gateway, gn.Address.Bits())}); err != nil {
		return nil, fmt.Errorf("bridge %s: %w", gn.Bridge, err)
	}
	return gn, nil
}

// Reconcile makes the bridge, the layer-2 filter, the NAT rules and the
// proxy routes match the desired state. Failures are logged when they
// change and retried next pass; guests keep their network as it is
// meanwhile.
func (n *Network) Reconcile(ctx context.Context, node *corpusv1.Node, guests []*corpusv1.Guest, table proxy.Routes, cdns ClusterDNS, policy Policy) {
	err := n.reconcile(ctx, node, guests, table, cdns, policy)
	n.mu.Lock()
	changed := (err == nil) != (n.lastErr == nil) || (err != nil && n.lastErr != nil && err.Error() != n.lastErr.Error())
	n.lastErr = err
	n.mu.Unlock()
	if changed {
		if err != nil {
			n.logger.Warn("reconciling the node's network", "error", err)
		} else {
			n.logger.Info("node network in place", "bridge", n.bridge, "subnet", node.GuestSubnet)
		}
	}
}

// reconcile does Reconcile's work; each part is tried even when another
// fails.
func (n *Network) reconcile(ctx context.Context, node *corpusv1.Node, guests []*corpusv1.Guest, table proxy.Routes, cdns ClusterDNS, policy Policy) error {
	if n.proxyOnly {
		if err := n.proxy.SetRoutes(table); err != nil {
			return fmt.Errorf("proxy routes: %w", err)
		}
		return nil
	}
	gw, err := gateway(node)
	if err != nil {
		return err
	}
	var errs []error
	if _, err := n.host.EnsureBridge(ctx, netns.Bridge{Name: n.bridge, Gateway: gw}); err != nil {
		errs = append(errs, fmt.Errorf("bridge %s: %w", n.bridge, err))
	} else {
		if err := n.ensureResolver(gw.Addr(), cdns); err != nil {
			errs = append(errs, err)
		}
		// A bridge recreated by hand lost its ports: put the running
		// guests' interfaces back on it (not those of guests being
		// started: see Policy.Starting).
		for _, g := range guests {
			if policy.Starting[g.Id] {
				continue
			}
			_, err := n.host.EnsurePort(ctx, n.bridge, hostInterface(g.Id))
			if err != nil && !errors.Is(err, netns.ErrNoLink) { // no link: the guest is not running
				errs = append(errs, fmt.Errorf("attaching guest %s: %w", g.Name, err))
			}
		}
	}
	routes := peerRoutes(gw.Masked(), policy.Peers)
	if _, err := n.host.EnsureRoutes(ctx, routes); err != nil {
		errs = append(errs, fmt.Errorf("routes to other nodes' guests: %w", err))
	}
	desired := nat.Desired{Subnets: []netip.Prefix{gw.Masked()}, Bridge: n.bridge, Blocked: policy.Control}
	for _, r := range routes {
		desired.Peers = append(desired.Peers, r.Dst)
	}
	desired.NodePorts = []nat.NodePort{{Proto: "udp", Port: 53}, {Proto: "tcp", Port: 53}}
	for _, p := range n.ReservedPorts() {
		desired.NodePorts = append(desired.NodePorts, nat.NodePort{Proto: "tcp", Port: int(p)})
	}
	groups := map[string][]netip.Addr{}
	var ports []l2filter.Port
	var neighbors []netns.Neighbor
	for _, g := range guests {
		addr, err := netip.ParseAddr(g.Address)
		if err != nil || g.DesiredState == corpusv1.DesiredDeleted || !gw.Contains(addr) {
			continue
		}
		if p := policy.Projects[g.Id]; p != "" {
			groups[p] = append(groups[p], addr)
		}
		if r := policy.Reach[g.Id]; r != nil && r.Port > 0 {
			sg := nat.Sealed{Addr: addr, Port: int(r.Port)}
			for _, f := range r.From {
				if a, err := netip.ParseAddr(f); err == nil && a.Is4() {
					sg.From = append(sg.From, a)
				}
			}
			desired.Sealed = append(desired.Sealed, sg)
		}
		ports = append(ports, l2filter.Port{Iface: hostInterface(g.Id), MAC: guestMAC(g.Id), Addr: addr})
		neighbors = append(neighbors, netns.Neighbor{Addr: addr, MAC: guestMAC(g.Id)})
		for _, p := range g.GetSpec().GetPorts() {
			desired.Forwards = append(desired.Forwards, nat.Forward{
				Proto: p.Protocol, HostPort: int(p.HostPort), GuestAddr: addr, GuestPort: int(p.GuestPort),
			})
		}
	}
	for _, p := range slices.Sorted(maps.Keys(groups)) {
		desired.Groups = append(desired.Groups, groups[p])
	}
	// Guests being deleted, or not yet given an address, are left out:
	// their ports send nothing.
	if ch, err := n.l2.Apply(ctx, ports); err != nil {
		errs = append(errs, fmt.Errorf("layer-2 filter: %w", err))
	} else {
		// Its write leaves the NAT's chains and table as they were: the
		// NAT need not read them back for it.
		n.nat.Passed(ch.Before, ch.After)
	}
	// A guest given the address of one deleted moments ago is reached
	// at once, not once the node's neighbour entry of the old one ages
	// out (a scale-up right after a scale-down met 30 s of timeouts).
	if _, err := n.host.CorrectNeighbors(ctx, n.bridge, neighbors); err != nil {
		errs = append(errs, fmt.Errorf("neighbours: %w", err))
	}
	if err := n.nat.Apply(ctx, desired); err != nil {
		errs = append(errs, fmt.Errorf("nat: %w", err))
	}
	if err := n.proxy.SetRoutes(table); err != nil {
		errs = append(errs, fmt.Errorf("proxy routes: %w", err))
	}
	return errors.Join(errs...)
}

// Policy is who guests may reach besides the outside world and what
// the node publishes: guests of one project reach each other (Projects:
// guest id to project name); nobody reaches the control plane's
// endpoints (Control), nor the node's own ports other than its resolver
// and proxy.
type Policy struct {
	Projects map[string]string
	Control  []netip.AddrPort
	// Reach seals the service guests (by guest id): only their linked
	// guests connect, on the service's port.
	Reach map[string]*corpusv1.ServiceReach
	// Peers are the other nodes' guest subnets: routed to their nodes,
	// not masqueraded, and let in only as Reach says.
	Peers []*corpusv1.PeerNode
	// Starting are the guests (by id) this node's agent is starting: their
	// driver makes their interface and attaches it to the bridge itself,
	// and one attached meanwhile by the reconcile fails that start
	// (liblxc's attach is refused with EBUSY: "Failed to create the
	// network").
	Starting map[string]bool
}

// peerRoutes are the routes to the other nodes' guest subnets (own
// excluded, malformed ones skipped).
func peerRoutes(own netip.Prefix, peers []*corpusv1.PeerNode) []netns.Route {
	var out []netns.Route
	for _, p := range peers {
		sub, err := netip.ParsePrefix(p.GuestSubnet)
		if err != nil || !sub.Addr().Is4() || sub.Masked() == own {
			continue
		}
		host := p.Address
		if h, _, err := net.SplitHostPort(p.Address); err == nil {
			host = h
		}
		via, err := netip.ParseAddr(host)
		if err != nil || !via.Is4() {
			continue
		}
		out = append(out, netns.Route{Dst: sub.Masked(), Via: via})
	}
	return out
}

// ProxyRoutes turns the node's routes into the proxy's table, leaving
// out those published otherwise (served, by route id). A route goes to
// the address target gives (a driver's, or the guest's own on the node's
// network); routes with no target yet are left out until they have one.
// The route of an environment with several instances carries its targets
// (each instance's web, wherever it runs), balanced by the proxy.
func ProxyRoutes(routes []*corpusv1.Route, guests map[string]*corpusv1.Guest, served map[string]bool, target func(r *corpusv1.Route, g *corpusv1.Guest) string) proxy.Routes {
	out := proxy.Routes{HTTP: map[string]proxy.HTTPRoute{}, TCP: map[int]proxy.TCPRoute{}}
	for _, r := range routes {
		if r.Is(corpusv1.RouteHTTP) && len(r.Targets) > 0 {
			// An environment's instances, on this node and others.
			out.HTTP[r.Domain] = proxy.HTTPRoute{Targets: r.Targets, HTTPS: r.Https, RedirectHTTPS: r.RedirectHttps, HSTS: r.Hsts}
			continue
		}
		g := guests[r.GuestId]
		if g == nil || served[r.Id] {
			continue
		}
		t := target(r, g)
		if t == "" {
			continue
		}
		switch corpusv1.RouteKind(r.Kind) {
		case corpusv1.RouteHTTP:
			out.HTTP[r.Domain] = proxy.HTTPRoute{Targets: []string{t}, HTTPS: r.Https, RedirectHTTPS: r.RedirectHttps, HSTS: r.Hsts}
		case corpusv1.RouteTCP:
			out.TCP[int(r.ListenPort)] = proxy.TCPRoute{Target: t}
		}
	}
	return out
}
