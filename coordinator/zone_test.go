package coordinator

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"corpus/coordinator/state"
	"corpus/coordinator/state/statetest"
	"corpus/dns"
	corpusv1 "corpus/proto/corpus/v1"
)

// zoneState is a state of n operator records beside a few nodes, guests
// and projects published in the zone, at index: what a cluster whose
// operators keep many records holds.
func zoneState(tb testing.TB, n int, index uint64) *state.Store {
	tb.Helper()
	snap := &corpusv1.Snapshot{Index: index, AppliedIndex: index}
	for i := range 3 {
		snap.Nodes = append(snap.Nodes, &corpusv1.Node{
			Id: fmt.Sprintf("node-%d", i), Name: fmt.Sprintf("n%d", i), Address: fmt.Sprintf("192.0.2.%d", 10+i),
			Status: corpusv1.NodeReady, ReservedPorts: []int32{80, 443},
		})
	}
	for i := range 10 {
		g := &corpusv1.Guest{
			Id: fmt.Sprintf("guest-%d", i), Name: fmt.Sprintf("g%d", i), Address: fmt.Sprintf("10.0.0.%d", 10+i),
			NodeId: fmt.Sprintf("node-%d", i%3), DesiredState: corpusv1.DesiredRunning,
		}
		snap.Guests = append(snap.Guests, g)
		snap.Projects = append(snap.Projects, &corpusv1.Project{
			Id: fmt.Sprintf("project-%d", i), Name: fmt.Sprintf("p%d", i),
			Envs: []*corpusv1.ProjectEnv{{Name: "dev", GuestId: g.Id, GuestName: g.Name, Domains: []string{fmt.Sprintf("p%d.example.test", i)}}},
		})
	}
	for i := range n {
		name := fmt.Sprintf("r%d.%s", i, dns.DefaultZone)
		snap.DnsRecords = append(snap.DnsRecords, &corpusv1.DnsRecord{
			Id: fmt.Sprintf("rec-%d", i), Name: name, Type: "TXT", Ttl: dns.DefaultTTL, Data: `"v"`,
			Key: name + " TXT \"v\"", CreateIndex: uint64(i + 1),
		})
	}
	return statetest.Store(tb, snap)
}

// zoneServer is a replica of the state zoneState makes whose DNS server
// answers from a zone built one write before the state (a served zone
// that lags, as it does while writes stream in).
func zoneServer(tb testing.TB, n int) *Server {
	tb.Helper()
	const index = 1_000_000
	nsAddr := netip.MustParseAddr("127.0.0.1")
	served, err := clusterZone(zoneState(tb, n, index-1).Read(), dns.DefaultZone, "c1", nsAddr)
	if err != nil {
		tb.Fatal(err)
	}
	return &Server{
		cfg:   Config{DNSZone: dns.DefaultZone, ReplicaID: "c1", RaftAddr: "127.0.0.1:0"},
		store: zoneState(tb, n, index),
		zone:  dns.NewStaticSource(served),
	}
}

// BenchmarkRecordFits: the check AddRecord makes before it writes a new
// record, in zones of 100, 1,000 and 10,000 operator records.
func BenchmarkRecordFits(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			s := zoneServer(b, n)
			rec := dns.Record{Name: "new." + dns.DefaultZone, Type: "A", Data: "192.0.2.99"}
			b.ReportAllocs()
			for b.Loop() {
				if err := s.recordFits(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// zoneMix is a state with every kind of name the zone publishes, and
// static records beside them: some conflict with a route or with each
// other (as a snapshot from before the state refused such pairs may
// hold), and are left out of the zone.
func zoneMix(tb testing.TB, index uint64, change ...func(*corpusv1.Snapshot)) *state.Store {
	tb.Helper()
	snap := &corpusv1.Snapshot{Index: index, AppliedIndex: index, Nodes: []*corpusv1.Node{
		{Id: "node-0", Name: "n0", Address: "192.0.2.10", Status: corpusv1.NodeReady, ReservedPorts: []int32{80, 443}},
		{Id: "node-1", Name: "n1", Address: "2001:db8::11", Status: corpusv1.NodeReady, ReservedPorts: []int32{8080}},
		{Id: "node-2", Name: "n2", Address: "192.0.2.12", Status: corpusv1.NodeDown},
		{Id: "node-3", Name: "n3", Status: corpusv1.NodeReady},
	}, Guests: []*corpusv1.Guest{
		{Id: "guest-0", Name: "g0", Address: "10.0.0.10", NodeId: "node-0", DesiredState: corpusv1.DesiredRunning},
		{Id: "guest-1", Name: "g1", Address: "10.0.0.11", NodeId: "node-1", DesiredState: corpusv1.DesiredRunning},
		{Id: "guest-2", Name: "g2", Address: "10.0.0.12", NodeId: "node-2", DesiredState: corpusv1.DesiredRunning},
		{Id: "guest-3", Name: "g3", Address: "10.0.0.13", NodeId: "node-0", DesiredState: corpusv1.DesiredDeleted},
		{Id: "guest-4", Name: "g4", NodeId: "node-0", DesiredState: corpusv1.DesiredRunning},
	}, Projects: []*corpusv1.Project{
		{Id: "project-0", Name: "p0", Envs: []*corpusv1.ProjectEnv{
			{Name: "dev", GuestId: "guest-0", GuestName: "g0", Domains: []string{"p0.example.test"}},
			{Name: "prod", GuestId: "guest-1", GuestName: "g1", Domains: []string{"www.example.test"}},
		}},
		{Id: "project-1", Name: "p1", Envs: []*corpusv1.ProjectEnv{{Name: "dev", GuestId: "guest-2", GuestName: "g2", Domains: []string{"p1.example.test"}}}},
		{Id: "project-2", Name: "p2", Envs: []*corpusv1.ProjectEnv{{Name: "dev", GuestId: "guest-1", GuestName: "g1"}}},
		{Id: "project-3", Name: "ns", Envs: []*corpusv1.ProjectEnv{{Name: "dev", GuestId: "guest-0", GuestName: "g0", Domains: []string{"ns.example.test"}}}},
	}}
	for i, r := range [][3]string{
		{"x", "A", "192.0.2.1"}, {"x", "TXT", `"hello"`}, {"w", "CNAME", "x.corpus.test."},
		{"p0.dev", "CNAME", "elsewhere.example."}, {"_http._tcp.p0.dev", "TXT", `"beside the SRV"`},
		{"y", "CNAME", "x.corpus.test."}, {"y", "A", "192.0.2.2"}, {"@", "TXT", `"apex"`},
		{"Mixed.Case", "A", "192.0.2.3"}, {"a.b.c", "MX", "10 x.corpus.test."}, {"p1.dev", "A", "192.0.2.4"},
	} {
		name := r[0] + "." + dns.DefaultZone
		if r[0] == "@" {
			name = dns.DefaultZone
		}
		snap.DnsRecords = append(snap.DnsRecords, &corpusv1.DnsRecord{
			Id: fmt.Sprintf("rec-%d", i), Name: name, Type: r[1], Ttl: dns.DefaultTTL, Data: r[2],
			Key: strings.ToLower(name) + " " + r[1] + " " + r[2], CreateIndex: uint64(i + 1),
		})
	}
	for _, f := range change {
		f(snap)
	}
	return statetest.Store(tb, snap)
}

// TestClusterZoneAt: at every name of the zone, and at names it does
// not hold, clusterZoneAt holds what clusterZone's zone holds, and a
// record fits the one exactly when it fits the other, with the same
// error.
func TestClusterZoneAt(t *testing.T) {
	t.Parallel()
	nsAddr := netip.MustParseAddr("127.0.0.1")
	v := zoneMix(t, 100).Read()
	full, err := clusterZone(v, dns.DefaultZone, "c1", nsAddr)
	if err != nil {
		t.Fatal(err)
	}
	if len(full.Skipped()) < 2 {
		t.Fatalf("the zone leaves out %v, want the static CNAME at p0.dev and the A beside y's CNAME", full.Skipped())
	}
	at := func(z *dns.Zone, name string) []string {
		var out []string
		for _, r := range z.Records() {
			if strings.EqualFold(r.Name, name) {
				out = append(out, r.String())
			}
		}
		slices.Sort(out)
		return out
	}
	names := map[string]bool{}
	for _, r := range full.Records() {
		names[strings.ToLower(r.Name)] = true
	}
	for _, n := range []string{"new", "g3.guest", "g4.guest", "n2.node", "n3.node", "p1.dev", "p2.dev", "_https._tcp.p0.dev", "b.c", "guest", "x.y.z"} {
		names[n+"."+dns.DefaultZone] = true
	}
	for name := range names {
		part, err := clusterZoneAt(v, dns.DefaultZone, "c1", nsAddr, name)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := at(part, name), at(full, name); !slices.Equal(got, want) {
			t.Errorf("clusterZoneAt(%s) holds %q there, clusterZone %q", name, got, want)
		}
		for _, rec := range []dns.Record{
			{Name: name, Type: "A", Data: "192.0.2.99"}, {Name: name, Type: "CNAME", Data: "target.example."},
			{Name: name, Type: "TXT", Data: "t"}, {Name: name, Type: "NS", Data: "ns.example."},
		} {
			if got, want := fmt.Sprint(part.Fits(rec)), fmt.Sprint(full.Fits(rec)); got != want {
				t.Errorf("Fits(%s) = %s in clusterZoneAt's zone, %s in clusterZone's", rec, got, want)
			}
		}
	}
}

// TestRecordFitsFollowsTheState: the check of a new record answers as
// of the state, not the served zone, which lags it while writes stream
// in: a record that conflicts with a name the state gained since the
// zone was built is refused, one at a name whose conflicting record
// the state lost since is let in.
func TestRecordFitsFollowsTheState(t *testing.T) {
	t.Parallel()
	nsAddr := netip.MustParseAddr("127.0.0.1")
	alias := func(snap *corpusv1.Snapshot) {
		snap.DnsRecords = append(snap.DnsRecords, &corpusv1.DnsRecord{
			Id: "rec-new", Name: "late." + dns.DefaultZone, Type: "CNAME", Ttl: dns.DefaultTTL, Data: "x.corpus.test.",
			Key: "late." + dns.DefaultZone + " CNAME x.corpus.test.", CreateIndex: 200,
		})
	}
	noDomains := func(snap *corpusv1.Snapshot) { snap.Projects[0].Envs[0].Domains = nil }
	late := dns.Record{Name: "late." + dns.DefaultZone, Type: "A", Data: "192.0.2.5"}
	for _, tt := range []struct {
		name          string
		served, state *state.Store
		rec           dns.Record
		want          error
	}{
		{"a record added since", zoneMix(t, 100), zoneMix(t, 200, alias), late, dns.ErrCNAMEConflict},
		{"a record deleted since", zoneMix(t, 100, alias), zoneMix(t, 200), late, nil},
		{"a route published since", zoneMix(t, 100, noDomains), zoneMix(t, 200), dns.Record{Name: "_https._tcp.p0.dev." + dns.DefaultZone, Type: "CNAME", Data: "a.example."}, dns.ErrCNAMEConflict},
		{"a route gone since", zoneMix(t, 100), zoneMix(t, 200, noDomains), dns.Record{Name: "_https._tcp.p0.dev." + dns.DefaultZone, Type: "CNAME", Data: "a.example."}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			z, err := clusterZone(tt.served.Read(), dns.DefaultZone, "c1", nsAddr)
			if err != nil {
				t.Fatal(err)
			}
			s := &Server{cfg: Config{DNSZone: dns.DefaultZone, ReplicaID: "c1", RaftAddr: "127.0.0.1:0"}, store: tt.state, zone: dns.NewStaticSource(z)}
			err = s.recordFits(tt.rec)
			if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Errorf("recordFits(%s) = %v, want %v", tt.rec, err, tt.want)
			}
			if err != nil && !strings.Contains(err.Error(), tt.rec.String()) {
				t.Errorf("recordFits(%s) = %v, want the record named", tt.rec, err)
			}
		})
	}
}

// TestRecordFitsCostsOneName: checking one more record costs the same
// beside 10 operator records as beside 3,000; rebuilding the zone for
// it made each add cost as much as the zone's size. Counted in
// allocations, which do not depend on the machine's load (and not in
// parallel: AllocsPerRun counts the whole process's).
func TestRecordFitsCostsOneName(t *testing.T) {
	rec := dns.Record{Name: "new." + dns.DefaultZone, Type: "A", Data: "192.0.2.99"}
	allocs := func(n int) float64 {
		s := zoneServer(t, n)
		return testing.AllocsPerRun(20, func() {
			if err := s.recordFits(rec); err != nil {
				t.Fatal(err)
			}
		})
	}
	if small, large := allocs(10), allocs(3000); large > 2*small {
		t.Errorf("recordFits allocates %.0f times beside 3,000 records, %.0f beside 10: want no more than twice as many", large, small)
	}
}
