package coordinator

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"corpus/coordinator/state"
	"corpus/dns"
	corpusv1 "corpus/proto/corpus/v1"
)

// clusterZone builds the DNS zone from one view of the state: this
// replica as name server, guests and nodes by name, operator records.
// A record that cannot be served is left out (the zone's Skipped), never
// the zone: the error is only for a zone name that is not a domain name.
func clusterZone(v *state.Snap, zoneName, nsName string, nsAddr netip.Addr) (*dns.Zone, error) {
	c := newCluster(v, zoneName, nsName, nsAddr)
	for _, g := range v.Guests() {
		addGuest(&c, g)
	}
	for _, n := range v.Nodes() {
		addNode(&c, n)
	}
	for _, p := range v.Projects() {
		for _, e := range p.Envs {
			addRoute(&c, v, p, e)
		}
	}
	addStatic(&c, v.DNSRecords())
	return dns.ClusterZone(c)
}

// clusterZoneAt builds from v the part of clusterZone's zone at name
// (absolute, lowercase): the same records there, and the apex, but
// none of the others, read through the state's indexes. What it costs
// does not grow with the zone, which the zone's own build does.
func clusterZoneAt(v *state.Snap, zoneName, nsName string, nsAddr netip.Addr, name string) (*dns.Zone, error) {
	c := newCluster(v, zoneName, nsName, nsAddr)
	at := dns.PublishersAt(zoneName, name)
	if g := v.GuestByName(at.Guest); g != nil { // no object is named ""
		addGuest(&c, g)
	}
	if n := v.NodeByName(at.Node); n != nil {
		addNode(&c, n)
	}
	if p := v.Project(at.Domain); p != nil {
		for _, e := range p.Envs {
			if e.Name == at.Env {
				addRoute(&c, v, p, e)
			}
		}
	}
	addStatic(&c, v.DNSRecordsNamed(name))
	return dns.ClusterZone(c)
}

// newCluster is the zone's frame: its name, serial and name server.
func newCluster(v *state.Snap, zoneName, nsName string, nsAddr netip.Addr) dns.Cluster {
	return dns.Cluster{
		Zone:        zoneName,
		Index:       v.Index(),
		NameServers: map[string]netip.Addr{nsName: nsAddr},
		Guests:      map[string]netip.Addr{},
		Nodes:       map[string]netip.Addr{},
	}
}

// addGuest publishes g, when it has an address and is not being deleted.
func addGuest(c *dns.Cluster, g *corpusv1.Guest) {
	if a, err := netip.ParseAddr(g.Address); err == nil && g.DesiredState != corpusv1.DesiredDeleted {
		c.Guests[g.Name] = a
	}
}

// addNode publishes n, when it has an address and answers: a node that
// stopped answering stops being published.
func addNode(c *dns.Cluster, n *corpusv1.Node) bool {
	a, err := netip.ParseAddr(n.Address)
	if err != nil || n.Status == corpusv1.NodeDown {
		return false
	}
	c.Nodes[n.Name] = a
	return true
}

// addRoute publishes project p's environment e: PROJECT.ENV.ZONE is the
// ingress of the environment (the node whose proxy serves its domains,
// and every other node with an instance, whose proxy balances over all
// of them), with SRV records for the proxy's ports. The nodes it names
// are published with it.
func addRoute(c *dns.Cluster, v *state.Snap, p *corpusv1.Project, e *corpusv1.ProjectEnv) {
	g := v.Guest(e.GuestId)
	if g == nil || g.NodeId == "" || g.DesiredState == corpusv1.DesiredDeleted || len(e.Domains) == 0 {
		return
	}
	n := v.Node(g.NodeId)
	if n == nil || !addNode(c, n) {
		return
	}
	r := dns.Route{Domain: p.Name, Env: e.Name, Nodes: []string{n.Name}}
	for _, id := range v.EnvNodes(e) {
		if o := v.Node(id); o != nil && o.Id != n.Id && addNode(c, o) {
			r.Nodes = append(r.Nodes, o.Name)
		}
	}
	for i, port := range n.ReservedPorts { // the proxy's: HTTP, then HTTPS
		svc := []string{"http", "https"}[min(i, 1)]
		r.Ports = append(r.Ports, dns.Port{Service: svc, Port: uint16(port)})
	}
	c.Routes = append(c.Routes, r)
}

// addStatic adds operator records, oldest first: of two static records
// that conflict (the state refuses such a pair, but a snapshot from
// before may hold one), the newer is the one left out.
func addStatic(c *dns.Cluster, static []*corpusv1.DnsRecord) {
	slices.SortStableFunc(static, func(a, b *corpusv1.DnsRecord) int { return cmp.Compare(a.CreateIndex, b.CreateIndex) })
	for _, r := range static {
		c.Static = append(c.Static, dns.Record{Name: r.Name, Type: r.Type, TTL: r.Ttl, Data: r.Data})
	}
}

// recordFits says whether rec could join the zone as of this replica's
// state now: nil, or the error Zone.Fits gives for the zone built from
// the state. Fits looks at rec's name alone, so the zone it asks is
// clusterZoneAt's, of that name: an add costs the same beside ten
// records or ten thousand, and follows the state however far the
// served zone lags it.
func (s *Server) recordFits(rec dns.Record) error {
	if s.zone == nil {
		return errors.New("this coordinator serves no DNS (its dns address is empty)")
	}
	name, err := dns.OwnerName(s.cfg.DNSZone, rec)
	if err != nil {
		return err
	}
	z, err := clusterZoneAt(s.store.Read(), s.cfg.DNSZone, s.cfg.ReplicaID, nameServerAddr(s.DNSAddr(), s.cfg.RaftAddr), name)
	if err != nil {
		return err
	}
	return z.Fits(rec)
}

// zoneLoop keeps src's zone equal to the state's: it rebuilds the zone
// whenever the state changes (a watch, not a poll), so records and the
// SOA serial follow the state's index: at once after a quiet spell, and
// at most every zoneRebuildEvery while writes stream in. A rebuild reads
// the whole state (every guest, node, route and record): done on each of
// hundreds of writes a second it took most of a 2-core machine's CPU and
// slowed the writes themselves fourfold (test/bench/raft).
func zoneLoop(ctx context.Context, store *state.Store, src *dns.StaticSource, zoneName, nsName string, nsAddr netip.Addr, logger *slog.Logger) {
	var (
		last    time.Time
		skipped string
	)
	for ctx.Err() == nil {
		if wait := zoneRebuildEvery - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		start := time.Now()
		v := store.Read()
		v.WatchIndex()
		z, err := clusterZone(v, zoneName, nsName, nsAddr)
		// The next rebuild waits zoneRebuildEvery, or zoneRebuildShare
		// times what this one took when that is longer: rebuilds take at
		// most that share of a CPU however large the state.
		last = start.Add(max(0, zoneRebuildShare*time.Since(start)-zoneRebuildEvery))
		if err != nil {
			logger.Error("building the dns zone; serving the previous one", "error", err)
		} else {
			src.Set(z)
			skipped = logSkipped(logger, skipped, z)
		}
		if v.Wait(ctx) != nil {
			return
		}
	}
}

// logSkipped logs the records zone z leaves out when they are not those
// logged last (said), and returns what it logged: once per change, not
// on every rebuild.
func logSkipped(logger *slog.Logger, said string, z *dns.Zone) string {
	var reasons []string
	for _, s := range z.Skipped() {
		reasons = append(reasons, s.Err.Error())
	}
	now := strings.Join(reasons, "; ")
	if now != said && now != "" {
		logger.Warn("dns records left out of the zone; the rest is served (corpus dns records shows them)", "records", len(reasons), "reasons", now)
	}
	return now
}

// zoneRebuildEvery bounds how often zoneLoop rebuilds the zone.
const zoneRebuildEvery = 100 * time.Millisecond

// zoneRebuildShare is the inverse of the share of a CPU zone rebuilds
// may take while writes stream in: after a rebuild of 20 ms the next
// waits 200 ms. The DNS server's fast-path tables are paced the same
// way (dns.Server), so a replica spends at most a fifth of a CPU on its
// zone; at four (a quarter each) a 3-replica group on two cores spent a
// third of its CPU there under test/bench/raft's writes.
const zoneRebuildShare = 10

// nameServerAddr is the address published for this replica's NS record:
// the DNS listen host, or the Raft host when that is unspecified.
func nameServerAddr(dnsAddr, raftAddr string) netip.Addr {
	for _, hp := range []string{dnsAddr, raftAddr} {
		host, _, err := net.SplitHostPort(hp)
		if err != nil {
			continue
		}
		if a, err := netip.ParseAddr(host); err == nil && !a.IsUnspecified() {
			return a
		}
	}
	return netip.MustParseAddr("127.0.0.1")
}
