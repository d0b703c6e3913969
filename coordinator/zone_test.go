package coordinator

import (
	"fmt"
	"net/netip"
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
