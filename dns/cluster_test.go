package dns

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/miekg/dns"
)

func TestClusterZone(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr
	c := Cluster{
		Index:       1<<32 + 9,
		NameServers: map[string]netip.Addr{"coord-1": a("192.0.2.10")},
		Guests:      map[string]netip.Addr{"web": a("10.0.0.5"), "db": a("fd00::7")},
		Nodes:       map[string]netip.Addr{"node-1": a("192.0.2.1"), "node-2": a("192.0.2.2")},
		Routes: []Route{{Domain: "hello", Env: "dev", Nodes: []string{"node-2", "node-1"},
			Ports: []Port{{Port: 80}, {Service: "https", Port: 443}}}},
		Static: []Record{{Name: "docs", Type: "CNAME", Data: "hello.dev"}},
	}
	z, err := ClusterZone(c)
	if err != nil {
		t.Fatalf("ClusterZone: %v", err)
	}
	if z.Serial() != 9 {
		t.Errorf("serial = %d, want 9 (low 32 bits of the index)", z.Serial())
	}
	var got []string
	for _, rr := range z.RRs() {
		got = append(got, rr.String())
	}
	want := []string{
		"corpus.test.\t30\tIN\tSOA\tcoord-1.ns.corpus.test. hostmaster.corpus.test. 9 60 10 86400 5",
		"corpus.test.\t30\tIN\tNS\tcoord-1.ns.corpus.test.",
		"hello.dev.corpus.test.\t30\tIN\tA\t192.0.2.1",
		"hello.dev.corpus.test.\t30\tIN\tA\t192.0.2.2",
		"_http._tcp.hello.dev.corpus.test.\t30\tIN\tSRV\t0 10 80 node-1.node.corpus.test.",
		"_http._tcp.hello.dev.corpus.test.\t30\tIN\tSRV\t0 10 80 node-2.node.corpus.test.",
		"_https._tcp.hello.dev.corpus.test.\t30\tIN\tSRV\t0 10 443 node-1.node.corpus.test.",
		"_https._tcp.hello.dev.corpus.test.\t30\tIN\tSRV\t0 10 443 node-2.node.corpus.test.",
		"docs.corpus.test.\t30\tIN\tCNAME\thello.dev.corpus.test.",
		"db.guest.corpus.test.\t30\tIN\tAAAA\tfd00::7",
		"web.guest.corpus.test.\t30\tIN\tA\t10.0.0.5",
		"node-1.node.corpus.test.\t30\tIN\tA\t192.0.2.1",
		"node-2.node.corpus.test.\t30\tIN\tA\t192.0.2.2",
		"coord-1.ns.corpus.test.\t30\tIN\tA\t192.0.2.10",
	}
	if !slices.Equal(got, want) {
		t.Errorf("records =\n%q\nwant\n%q", got, want)
	}
	recs := z.Records()
	if recs[0].Type != "SOA" || recs[len(recs)-1] != (Record{Name: "coord-1.ns.corpus.test.", Type: "A", TTL: 30, Data: "192.0.2.10"}) {
		t.Errorf("Records() = %v", recs)
	}
}

func TestZoneErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		recs []Record
		want error
	}{
		{"unknown type", []Record{{Name: "x", Type: "PTR", Data: "y"}}, ErrBadRecord},
		{"bad data", []Record{{Name: "x", Type: "A", Data: "not-an-ip"}}, ErrBadRecord},
		{"injected line", []Record{{Name: "x", Type: "A", Data: "10.0.0.1\nevil 30 IN A 10.6.6.6"}}, ErrBadRecord},
		{"out of zone", []Record{{Name: "x.example.org.", Type: "A", Data: "10.0.0.1"}}, ErrOutOfZone},
		{"CNAME and A", []Record{{Name: "x", Type: "A", Data: "10.0.0.1"}, {Name: "x", Type: "CNAME", Data: "y"}}, ErrCNAMEConflict},
		{"A and CNAME", []Record{{Name: "x", Type: "CNAME", Data: "y"}, {Name: "x", Type: "A", Data: "10.0.0.1"}}, ErrCNAMEConflict},
		{"delegation", []Record{{Name: "sub", Type: "NS", Data: "ns.elsewhere."}}, ErrDelegation},
		{"two SOAs", []Record{{Name: "@", Type: "SOA", Data: "a b 1 2 3 4 5"}, {Name: "@", Type: "SOA", Data: "c d 1 2 3 4 5"}}, ErrBadRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := NewZone("", 1, tt.recs); !errors.Is(err, tt.want) {
				t.Errorf("NewZone = %v, want %v", err, tt.want)
			}
		})
	}
	if _, err := ClusterZone(Cluster{Guests: map[string]netip.Addr{"a.b": netip.MustParseAddr("10.0.0.1")}}); !errors.Is(err, ErrBadRecord) {
		t.Errorf("guest with a dot = %v, want ErrBadRecord", err)
	}
	if _, err := ClusterZone(Cluster{Routes: []Route{{Domain: "x", Env: "y", Nodes: []string{"ghost"}}}}); !errors.Is(err, ErrBadRecord) {
		t.Errorf("route on an unknown node = %v, want ErrBadRecord", err)
	}
	if err := (Config{}).Validate(); !errors.Is(err, ErrBadConfig) {
		t.Errorf("empty config = %v, want ErrBadConfig", err)
	}
	_ = dns.TypeA
}
