package dns

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// Cluster is the part of the cluster state the zone is built from, as plain
// data the coordinator fills from its state.
type Cluster struct {
	// Zone is the zone's name; DefaultZone when empty.
	Zone string
	// Index is the state's index; the SOA serial is its low 32 bits, which
	// RFC 1982 serial arithmetic tolerates wrapping.
	Index uint64
	// TTL of the generated records; DefaultTTL when 0.
	TTL uint32
	// NameServers are the zone's name servers (usually the coordinators) by
	// name, published as NAME.ns.ZONE with an apex NS record each. The first
	// one is the SOA's primary.
	NameServers map[string]netip.Addr
	// Guests by name, published as NAME.guest.ZONE.
	Guests map[string]netip.Addr
	// Nodes by name, published as NAME.node.ZONE.
	Nodes map[string]netip.Addr
	// Routes publish projects' environments.
	Routes []Route
	// Static are operator records, added as given.
	Static []Record
}

// Route is one project environment served by ingress nodes: its name
// DOMAIN.ENV.ZONE resolves to the addresses of Nodes, and
// _PROTO._tcp.DOMAIN.ENV.ZONE SRV records list each published port on each
// node (by its NAME.node.ZONE name).
type Route struct {
	// Domain is the project's domain label, for example "hello".
	Domain string
	// Env is the environment, for example "dev".
	Env string
	// Nodes are the names of the nodes serving the route; each must be in
	// Cluster.Nodes.
	Nodes []string
	// Ports are the published ports.
	Ports []Port
}

// Port is one published port of a route.
type Port struct {
	// Service is the SRV service label without underscore, "http" when empty.
	Service string
	// Port is the port number.
	Port uint16
}

// ClusterRecords returns the records c describes, in a stable order. Names
// that are not valid DNS labels return ErrBadRecord.
func ClusterRecords(c Cluster) ([]Record, error) {
	ttl := c.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	var out []Record
	addr := func(name string, a netip.Addr) {
		t := "A"
		if a.Unmap().Is6() {
			t = "AAAA"
		}
		out = append(out, Record{Name: name, Type: t, TTL: ttl, Data: a.Unmap().String()})
	}
	nsNames := sortedKeys(c.NameServers)
	for i, name := range nsNames {
		if err := checkLabel(name); err != nil {
			return nil, fmt.Errorf("name server: %w", err)
		}
		if i == 0 {
			out = append(out, Record{Name: "@", Type: "SOA", TTL: ttl,
				Data: fmt.Sprintf("%s.ns hostmaster 0 60 10 86400 %d", name, DefaultNegativeTTL)})
		}
		out = append(out, Record{Name: "@", Type: "NS", TTL: ttl, Data: name + ".ns"})
		addr(name+".ns", c.NameServers[name])
	}
	for _, name := range sortedKeys(c.Nodes) {
		if err := checkLabel(name); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
		addr(name+".node", c.Nodes[name])
	}
	for _, name := range sortedKeys(c.Guests) {
		if err := checkLabel(name); err != nil {
			return nil, fmt.Errorf("guest: %w", err)
		}
		addr(name+".guest", c.Guests[name])
	}
	for _, r := range c.Routes {
		if err := checkLabel(r.Domain); err != nil {
			return nil, fmt.Errorf("route domain: %w", err)
		}
		if err := checkLabel(r.Env); err != nil {
			return nil, fmt.Errorf("route env: %w", err)
		}
		owner := r.Domain + "." + r.Env
		nodes := append([]string(nil), r.Nodes...)
		sort.Strings(nodes)
		for _, n := range nodes {
			a, ok := c.Nodes[n]
			if !ok {
				return nil, fmt.Errorf("route %s: unknown node %q: %w", owner, n, ErrBadRecord)
			}
			addr(owner, a)
		}
		for _, p := range r.Ports {
			svc := p.Service
			if svc == "" {
				svc = "http"
			}
			if err := checkLabel(svc); err != nil {
				return nil, fmt.Errorf("route %s service: %w", owner, err)
			}
			for _, n := range nodes {
				out = append(out, Record{Name: "_" + svc + "._tcp." + owner, Type: "SRV", TTL: ttl,
					Data: "0 10 " + strconv.Itoa(int(p.Port)) + " " + n + ".node"})
			}
		}
	}
	out = append(out, c.Static...)
	return out, nil
}

// ClusterZone builds the zone c describes: ClusterRecords at serial
// uint32(c.Index). Errors are those of ClusterRecords and NewZone.
func ClusterZone(c Cluster) (*Zone, error) {
	recs, err := ClusterRecords(c)
	if err != nil {
		return nil, err
	}
	return NewZone(c.Zone, uint32(c.Index), recs)
}

func checkLabel(s string) error {
	if s == "" || len(s) > 63 || strings.ContainsAny(s, ". \t\\\"();@$") {
		return fmt.Errorf("label %q: %w", s, ErrBadRecord)
	}
	if _, ok := dns.IsDomainName(s + "."); !ok {
		return fmt.Errorf("label %q: %w", s, ErrBadRecord)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
