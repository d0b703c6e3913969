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
	c := dns.Cluster{
		Zone:        zoneName,
		Index:       v.Index(),
		NameServers: map[string]netip.Addr{nsName: nsAddr},
		Guests:      map[string]netip.Addr{},
		Nodes:       map[string]netip.Addr{},
	}
	for _, g := range v.Guests() {
		if a, err := netip.ParseAddr(g.Address); err == nil && g.DesiredState != corpusv1.DesiredDeleted {
			c.Guests[g.Name] = a
		}
	}
	for _, n := range v.Nodes() {
		// A node that stopped answering stops being published.
		if a, err := netip.ParseAddr(n.Address); err == nil && n.Status != corpusv1.NodeDown {
			c.Nodes[n.Name] = a
		}
	}
	// Projects: NAME.ENV.ZONE is the ingress of the environment (the node
	// whose proxy serves its domains), with SRV records for the proxy's
	// ports.
	for _, p := range v.Projects() {
		for _, e := range p.Envs {
			g := v.Guest(e.GuestId)
			if g == nil || g.NodeId == "" || g.DesiredState == corpusv1.DesiredDeleted || len(e.Domains) == 0 {
				continue
			}
			n := v.Node(g.NodeId)
			if n == nil {
				continue
			}
			if _, published := c.Nodes[n.Name]; !published {
				continue
			}
			r := dns.Route{Domain: p.Name, Env: e.Name, Nodes: []string{n.Name}}
			// Every node with an instance serves the domains (its proxy
			// balances over all of them).
			for _, id := range v.EnvNodes(e) {
				if o := v.Node(id); o != nil && o.Id != n.Id {
					if _, published := c.Nodes[o.Name]; published {
						r.Nodes = append(r.Nodes, o.Name)
					}
				}
			}
			for i, port := range n.ReservedPorts { // the proxy's: HTTP, then HTTPS
				svc := []string{"http", "https"}[min(i, 1)]
				r.Ports = append(r.Ports, dns.Port{Service: svc, Port: uint16(port)})
			}
			c.Routes = append(c.Routes, r)
		}
	}
	// Oldest first: of two static records that conflict (the state
	// refuses such a pair, but a snapshot from before may hold one), the
	// newer is the one left out.
	static := v.DNSRecords()
	slices.SortStableFunc(static, func(a, b *corpusv1.DnsRecord) int { return cmp.Compare(a.CreateIndex, b.CreateIndex) })
	for _, r := range static {
		c.Static = append(c.Static, dns.Record{Name: r.Name, Type: r.Type, TTL: r.Ttl, Data: r.Data})
	}
	return dns.ClusterZone(c)
}

// recordFits says whether rec could join the zone as of this replica's
// state now: nil, or the error Zone.Fits gives.
func (s *Server) recordFits(rec dns.Record) error {
	z := s.currentZone()
	if z == nil {
		return errors.New("this coordinator serves no DNS (its dns address is empty)")
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
		// The next rebuild waits zoneRebuildEvery, or four times what this
		// one took when that is longer: rebuilds take at most a fifth of
		// a CPU however large the state.
		last = start.Add(max(0, 4*time.Since(start)-zoneRebuildEvery))
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
