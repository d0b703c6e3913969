package dns

import (
	"fmt"
	"net/netip"
	"slices"
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

// ClusterRecords returns the records c describes, in a stable order:
// the zone's own (SOA, NS, name servers), nodes, guests, routes, then the
// static records, so that a static record that conflicts with a
// generated one is the one a zone leaves out. What cannot make a record
// (a name that is not a DNS label, a route on an unknown node) is in
// skipped, with an error wrapping ErrBadRecord.
func ClusterRecords(c Cluster) ([]Record, []Skipped) {
	ttl := c.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	var (
		out     []Record
		skipped []Skipped
	)
	skip := func(r Record, err error) {
		skipped = append(skipped, Skipped{Record: r, Err: fmt.Errorf("record %q: %w", r.String(), err)})
	}
	addr := func(name string, a netip.Addr) Record {
		t := "A"
		if a.Unmap().Is6() {
			t = "AAAA"
		}
		return Record{Name: name, Type: t, TTL: ttl, Data: a.Unmap().String()}
	}
	nsNames := sortedKeys(c.NameServers)
	for i, name := range nsNames {
		if err := checkLabel(name); err != nil {
			skip(addr(name+".ns", c.NameServers[name]), fmt.Errorf("name server: %w", err))
			continue
		}
		if i == 0 {
			out = append(out, Record{Name: "@", Type: "SOA", TTL: ttl,
				Data: fmt.Sprintf("%s.ns hostmaster 0 60 10 86400 %d", name, DefaultNegativeTTL)})
		}
		out = append(out, Record{Name: "@", Type: "NS", TTL: ttl, Data: name + ".ns"})
		out = append(out, addr(name+".ns", c.NameServers[name]))
	}
	for _, name := range sortedKeys(c.Nodes) {
		r := addr(name+".node", c.Nodes[name])
		if err := checkLabel(name); err != nil {
			skip(r, fmt.Errorf("node: %w", err))
			continue
		}
		out = append(out, r)
	}
	for _, name := range sortedKeys(c.Guests) {
		r := addr(name+".guest", c.Guests[name])
		if err := checkLabel(name); err != nil {
			skip(r, fmt.Errorf("guest: %w", err))
			continue
		}
		out = append(out, r)
	}
	for _, r := range c.Routes {
		owner := r.Domain + "." + r.Env
		if err := checkLabel(r.Domain); err != nil {
			skip(Record{Name: owner, Type: "A", TTL: ttl}, fmt.Errorf("route domain: %w", err))
			continue
		}
		if err := checkLabel(r.Env); err != nil {
			skip(Record{Name: owner, Type: "A", TTL: ttl}, fmt.Errorf("route env: %w", err))
			continue
		}
		var nodes []string
		for _, n := range slices.Sorted(slices.Values(r.Nodes)) {
			a, ok := c.Nodes[n]
			if !ok {
				skip(Record{Name: owner, Type: "A", TTL: ttl}, fmt.Errorf("route %s: unknown node %q: %w", owner, n, ErrBadRecord))
				continue
			}
			nodes = append(nodes, n)
			out = append(out, addr(owner, a))
		}
		for _, p := range r.Ports {
			svc := p.Service
			if svc == "" {
				svc = "http"
			}
			for _, n := range nodes {
				srv := Record{Name: "_" + svc + "._tcp." + owner, Type: "SRV", TTL: ttl,
					Data: "0 10 " + strconv.Itoa(int(p.Port)) + " " + n + ".node"}
				if err := checkLabel(svc); err != nil {
					skip(srv, fmt.Errorf("route %s service: %w", owner, err))
					continue
				}
				out = append(out, srv)
			}
		}
	}
	out = append(out, c.Static...)
	return out, skipped
}

// ClusterZone builds the zone c describes: ClusterRecords at serial
// uint32(c.Index), through BuildZone, so a record that cannot be served
// is left out (Zone.Skipped says which and why) and the rest is served.
// The error is BuildZone's, for a zone name that is not a domain name.
func ClusterZone(c Cluster) (*Zone, error) {
	recs, skipped := ClusterRecords(c)
	z, err := BuildZone(c.Zone, uint32(c.Index), recs)
	if err != nil {
		return nil, err
	}
	built := z.skipped
	z.skipped = nil
	for _, s := range skipped {
		z.skip(s.Record, s.Err)
	}
	z.skipped = append(z.skipped, built...)
	return z, nil
}

// Publishers names the parts of a Cluster that may publish records at
// one name of its zone, as ClusterRecords names what it publishes; the
// apex's SOA and NS come from the name servers. A Cluster of these
// parts, its name servers and the static records at the name gives a
// zone that holds at that name just what the whole Cluster's zone holds
// there: a record can be checked against a zone of any size at the cost
// of one name (Zone.Fits looks at its name alone).
type Publishers struct {
	// NameServer, Node and Guest are the NAME of NAME.ns.ZONE,
	// NAME.node.ZONE and NAME.guest.ZONE.
	NameServer, Node, Guest string
	// Domain and Env are a Route's, at DOMAIN.ENV.ZONE or at
	// _SERVICE._tcp.DOMAIN.ENV.ZONE.
	Domain, Env string
}

// PublishersAt returns the parts of a Cluster of zone (DefaultZone when
// empty) that may publish records at name, an absolute name in any
// case; none for a name outside the zone or one no part publishes at.
func PublishersAt(zone, name string) Publishers {
	if zone == "" {
		zone = DefaultZone
	}
	origin, name := dns.CanonicalName(zone), dns.CanonicalName(name)
	rel, ok := strings.CutSuffix(name, "."+origin)
	if origin == "." {
		rel, ok = strings.TrimSuffix(name, "."), name != "."
	}
	if !ok {
		return Publishers{}
	}
	var p Publishers
	switch l := strings.Split(rel, "."); {
	case len(l) == 2:
		switch l[1] {
		case "ns":
			p.NameServer = l[0]
		case "node":
			p.Node = l[0]
		case "guest":
			p.Guest = l[0]
		}
		p.Domain, p.Env = l[0], l[1]
	case len(l) == 4 && strings.HasPrefix(l[0], "_") && l[1] == "_tcp":
		p.Domain, p.Env = l[2], l[3]
	}
	return p
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
