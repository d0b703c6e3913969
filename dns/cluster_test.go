package dns

import (
	"cmp"
	"errors"
	"net/netip"
	"slices"
	"strings"
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

// TestPublishersAt: every name a part of a Cluster publishes records
// at names that part, in any zone and any case; other names name none.
func TestPublishersAt(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr
	ns := map[string]netip.Addr{"coord-1": a("192.0.2.10")}
	nodes := map[string]netip.Addr{"node-1": a("192.0.2.1"), "node-2": a("2001:db8::2")}
	route := Route{Domain: "hello", Env: "dev", Nodes: []string{"node-1", "node-2"}, Ports: []Port{{Port: 80}, {Service: "https", Port: 443}}}
	for _, zone := range []string{"", "Example.COM", "a.b.c.", "."} {
		origin := dns.CanonicalName(cmp.Or(zone, DefaultZone))
		abs := func(rel string) string { // rel, absolute in zone
			if origin == "." {
				return rel + "."
			}
			return rel + "." + origin
		}
		for _, tt := range []struct {
			part, others Cluster // others: what the part needs beside it
			want         Publishers
		}{
			{Cluster{NameServers: map[string]netip.Addr{"coord-2": a("192.0.2.11")}}, Cluster{}, Publishers{NameServer: "coord-2", Domain: "coord-2", Env: "ns"}},
			{Cluster{Nodes: map[string]netip.Addr{"node-3": a("192.0.2.3")}}, Cluster{NameServers: ns}, Publishers{Node: "node-3", Domain: "node-3", Env: "node"}},
			{Cluster{Guests: map[string]netip.Addr{"web": a("fd00::7")}}, Cluster{NameServers: ns}, Publishers{Guest: "web", Domain: "web", Env: "guest"}},
			{Cluster{Routes: []Route{route}}, Cluster{NameServers: ns, Nodes: nodes}, Publishers{Domain: "hello", Env: "dev"}},
		} {
			whole := tt.part
			whole.Zone = zone
			if whole.NameServers == nil {
				whole.NameServers = tt.others.NameServers
			}
			if whole.Nodes == nil {
				whole.Nodes = tt.others.Nodes
			}
			recs, skipped := ClusterRecords(whole)
			if len(skipped) > 0 {
				t.Fatalf("ClusterRecords(%+v) skips %v", whole, skipped)
			}
			others, _ := ClusterRecords(tt.others)
			published := 0
			for _, r := range recs {
				if r.Name == "@" || slices.ContainsFunc(others, func(o Record) bool { return o.Name == r.Name }) {
					continue
				}
				published++
				name := strings.ToUpper(abs(r.Name))
				if got := PublishersAt(zone, name); got != tt.want {
					t.Errorf("PublishersAt(%q, %s) = %+v, want %+v", zone, name, got, tt.want)
				}
			}
			if published == 0 {
				t.Errorf("zone %q: no name of %+v checked", zone, tt.want)
			}
		}
		for _, name := range []string{origin, abs("www"), abs("a.b.c.d"), abs("_http._udp.hello.dev")} {
			if got := PublishersAt(zone, name); got != (Publishers{}) {
				t.Errorf("PublishersAt(%q, %s) = %+v, want none", zone, name, got)
			}
		}
		if got := PublishersAt(zone, "web.guest.elsewhere."); got != (Publishers{}) && origin != "." {
			t.Errorf("PublishersAt(%q, web.guest.elsewhere.) = %+v, want none", zone, got)
		}
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
			// The last record, checked against a zone of the others.
			last := len(tt.recs) - 1
			z, err := NewZone("", 1, tt.recs[:last])
			if err != nil {
				t.Fatal(err)
			}
			if err := z.Fits(tt.recs[last]); !errors.Is(err, tt.want) {
				t.Errorf("Fits(%s) = %v, want %v", tt.recs[last], err, tt.want)
			}
		})
	}
	if err := (Config{}).Validate(); !errors.Is(err, ErrBadConfig) {
		t.Errorf("empty config = %v, want ErrBadConfig", err)
	}
	_ = dns.TypeA
}

// TestZoneFits: a record Fits the zone exactly when NewZone builds the
// zone's records with it.
func TestZoneFits(t *testing.T) {
	t.Parallel()
	held := []Record{{Name: "x", Type: "A", Data: "10.0.0.1"}, {Name: "x", Type: "TXT", Data: "hello"}, {Name: "w", Type: "CNAME", Data: "x"}}
	z, err := NewZone("", 1, held)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		rec  Record
		want error
	}{
		{Record{Name: "x", Type: "A", Data: "10.0.0.2"}, nil},
		{Record{Name: "x", Type: "A", Data: "10.0.0.1"}, nil}, // the same again
		{Record{Name: "y", Type: "CNAME", Data: "x"}, nil},
		{Record{Name: "a.b.x", Type: "A", Data: "10.0.0.3"}, nil},
		{Record{Name: "x", Type: "CNAME", Data: "y"}, ErrCNAMEConflict},
		{Record{Name: "w", Type: "TXT", Data: "beside a CNAME"}, ErrCNAMEConflict},
		{Record{Name: "w", Type: "CNAME", Data: "v"}, ErrCNAMEConflict},
		{Record{Name: "@", Type: "CNAME", Data: "y"}, ErrCNAMEConflict}, // the apex has its SOA and NS
		{Record{Name: "@", Type: "NS", Data: "ns2.elsewhere."}, nil},
		{Record{Name: "x.", Type: "A", Data: "10.0.0.1"}, ErrOutOfZone},
	} {
		err := z.Fits(tt.rec)
		if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
			t.Errorf("Fits(%s) = %v, want %v", tt.rec, err, tt.want)
		}
		if _, built := NewZone("", 1, append(slices.Clone(held), tt.rec)); (built == nil) != (err == nil) {
			t.Errorf("Fits(%s) = %v but NewZone with it = %v", tt.rec, err, built)
		}
	}
}

// TestZoneSkips: a record the zone cannot serve is left out and listed
// with why; every other record is served. Generated records go before
// static ones, so a static record that conflicts with a generated name
// is the one left out, and of two conflicting static records the later.
func TestZoneSkips(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr
	c := Cluster{
		Index:  7,
		Guests: map[string]netip.Addr{"web": a("10.0.0.5"), "a.b": a("10.0.0.6")},
		Nodes:  map[string]netip.Addr{"node-1": a("192.0.2.1")},
		Routes: []Route{
			{Domain: "hello", Env: "dev", Nodes: []string{"node-1", "ghost"}},
		},
		Static: []Record{
			{Name: "www", Type: "CNAME", Data: "web.guest"},
			{Name: "www", Type: "A", Data: "10.0.0.9"},            // beside the CNAME
			{Name: "hello.dev", Type: "CNAME", Data: "web.guest"}, // beside the route's A
			{Name: "@", Type: "CNAME", Data: "web.guest"},         // beside the SOA and NS
			{Name: "x.example.org.", Type: "A", Data: "10.0.0.1"},
			{Name: "bad", Type: "A", Data: "not-an-ip"},
			{Name: "mail", Type: "A", Data: "192.0.2.25"},
		},
	}
	z, err := ClusterZone(c)
	if err != nil {
		t.Fatalf("ClusterZone = %v, want a zone with the bad records left out", err)
	}
	var got []string
	for _, s := range z.Skipped() {
		got = append(got, s.Record.Name+" "+s.Record.Type)
		if s.Err == nil {
			t.Errorf("skipped %v without a reason", s.Record)
		}
	}
	want := []string{"a.b.guest.corpus.test. A", "hello.dev.corpus.test. A", "bad.corpus.test. A", "www.corpus.test. A",
		"hello.dev.corpus.test. CNAME", "corpus.test. CNAME", "x.example.org. A"}
	if !slices.Equal(got, want) {
		t.Errorf("skipped = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		name string
		want error
	}{
		{"www.corpus.test. A", ErrCNAMEConflict}, {"corpus.test. CNAME", ErrCNAMEConflict}, {"x.example.org. A", ErrOutOfZone},
		{"bad.corpus.test. A", ErrBadRecord}, {"a.b.guest.corpus.test. A", ErrBadRecord},
	} {
		if i := slices.Index(got, tc.name); i >= 0 && !errors.Is(z.Skipped()[i].Err, tc.want) {
			t.Errorf("%s skipped for %v, want %v", tc.name, z.Skipped()[i].Err, tc.want)
		}
	}
	served := map[string]bool{}
	for _, r := range z.Records() {
		served[r.Name+" "+r.Type+" "+r.Data] = true
	}
	for _, w := range []string{
		"web.guest.corpus.test. A 10.0.0.5", "node-1.node.corpus.test. A 192.0.2.1", "hello.dev.corpus.test. A 192.0.2.1",
		"www.corpus.test. CNAME web.guest.corpus.test.", "mail.corpus.test. A 192.0.2.25",
	} {
		if !served[w] {
			t.Errorf("zone lacks %q; served: %v", w, served)
		}
	}
	if _, err := NewZone("", 1, c.Static[:2]); !errors.Is(err, ErrCNAMEConflict) {
		t.Errorf("NewZone of conflicting records = %v, want ErrCNAMEConflict", err)
	}
	if _, err := BuildZone("a..b", 1, nil); !errors.Is(err, ErrBadRecord) {
		t.Errorf("BuildZone(bad zone) = %v, want ErrBadRecord", err)
	}
}

// TestTXT: TXT data in the zone-file form (quoted strings, with escapes)
// is read as RFC 1035 says; a plain value is one string, spaces and
// quotes included, cut into 255-byte strings when longer. Records give
// the canonical quoted form, which reads back as the same record.
func TestTXT(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		data string
		want []string
	}{
		{`v=spf1 -all`, []string{"v=spf1 -all"}},
		{`"v=spf1 -all"`, []string{"v=spf1 -all"}},
		{`"a b" "c"`, []string{"a b", "c"}},
		{`say "hi" now`, []string{`say "hi" now`}},
		{`"say \"hi\"" "\065"`, []string{`say "hi"`, "A"}},
		{`a;b \c`, []string{`a;b \c`}},
		{"tab\there", []string{"tab\there"}},
		{long, []string{long[:255], long[255:]}},
	} {
		z, err := NewZone("", 1, []Record{{Name: "t", Type: "TXT", Data: tc.data}})
		if err != nil {
			t.Errorf("NewZone(TXT %s) = %v", tc.data, err)
			continue
		}
		if got := txtOf(z); !slices.Equal(got, tc.want) {
			t.Errorf("TXT %s = %q, want %q", tc.data, got, tc.want)
			continue
		}
		var rec Record
		for _, r := range z.Records() {
			if r.Type == "TXT" {
				rec = r
			}
		}
		again, err := NewZone("", 1, []Record{rec})
		if err != nil {
			t.Errorf("NewZone(%v) = %v", rec, err)
			continue
		}
		if got := txtOf(again); !slices.Equal(got, tc.want) {
			t.Errorf("TXT %s read back from %q = %q, want %q", tc.data, rec.Data, got, tc.want)
		}
	}
	for _, bad := range []string{`"unterminated`, `"a" b"`} {
		if _, err := NewZone("", 1, []Record{{Name: "t", Type: "TXT", Data: bad}}); !errors.Is(err, ErrBadRecord) {
			t.Errorf("NewZone(TXT %s) = %v, want ErrBadRecord", bad, err)
		}
	}
}

// txtOf returns the strings of the zone's TXT record as they go on the
// wire (the rdata's character-strings).
func txtOf(z *Zone) []string {
	for _, rr := range z.RRs() {
		if _, ok := rr.(*dns.TXT); !ok {
			continue
		}
		buf := make([]byte, 4096)
		end, err := dns.PackRR(rr, buf, 0, nil, false)
		if err != nil {
			return []string{"pack: " + err.Error()}
		}
		off, _ := dns.PackDomainName(rr.Header().Name, make([]byte, 256), 0, nil, false)
		var out []string
		for data := buf[off+10 : end]; len(data) > 0; {
			n := int(data[0])
			out, data = append(out, string(data[1:1+n])), data[1+n:]
		}
		return out
	}
	return nil
}
