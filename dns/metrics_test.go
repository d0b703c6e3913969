package dns

import (
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"corpus/internal/metrics/metricstest"
)

// TestQueryMetrics: queries are counted by type and rcode, unknown types
// as other, and rate-limited ones by what was done with them.
func TestQueryMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	cfg := testConfig()
	cfg.Metrics = reg
	cfg.RateLimit = RateLimit{PerSecond: 0.001, Burst: 4, Slip: 2, MaxSources: 10}
	z := testZone(t, 1)
	_, addr := startServer(t, cfg, NewStaticSource(z))
	origin := z.Origin()
	exchange(t, "udp", addr, query("web.guest."+origin, dns.TypeA))
	exchange(t, "udp", addr, query("nothing."+origin, dns.TypeA))
	exchange(t, "udp", addr, query("example.org.", dns.TypeAAAA))
	exchange(t, "tcp", addr, query("web.guest."+origin, dns.TypeNULL))
	// Over the burst of 4 UDP answers: the next is dropped, the one after
	// slipped.
	exchange(t, "udp", addr, query("web.guest."+origin, dns.TypeA))
	c := &dns.Client{Net: "udp", Timeout: 300 * time.Millisecond}
	if _, _, err := c.Exchange(query("web.guest."+origin, dns.TypeA), addr); err == nil {
		t.Errorf("a query past the rate limit was answered, want it dropped")
	}
	if r := exchange(t, "udp", addr, query("web.guest."+origin, dns.TypeA)); !r.Truncated || len(r.Answer) > 0 {
		t.Errorf("the second query past the limit got %v, want an empty truncated answer", r)
	}
	want := `
# HELP corpus_dns_queries_total DNS queries answered, by query type (common types by name, else other) and response code.
# TYPE corpus_dns_queries_total counter
corpus_dns_queries_total{rcode="NOERROR",type="A"} 2
corpus_dns_queries_total{rcode="NOERROR",type="other"} 1
corpus_dns_queries_total{rcode="NXDOMAIN",type="A"} 1
corpus_dns_queries_total{rcode="REFUSED",type="AAAA"} 1
# HELP corpus_dns_records_skipped Records the served zone leaves out because they cannot be served (a CNAME beside other data, a bad name); corpus dns records shows them and why.
# TYPE corpus_dns_records_skipped gauge
corpus_dns_records_skipped 0
# HELP corpus_dns_rate_limited_total UDP queries over their source's rate limit, by action: dropped, or slipped (an empty truncated answer).
# TYPE corpus_dns_rate_limited_total counter
corpus_dns_rate_limited_total{action="drop"} 1
corpus_dns_rate_limited_total{action="slip"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestRecordsSkippedMetric: the gauge follows the served zone's records
// left out.
func TestRecordsSkippedMetric(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	cfg := testConfig()
	cfg.Metrics = reg
	bad, err := BuildZone("", 1, []Record{
		{Name: "x", Type: "CNAME", Data: "y"},
		{Name: "x", Type: "A", Data: "10.0.0.1"},
		{Name: "z", Type: "A", Data: "not-an-ip"},
	})
	if err != nil {
		t.Fatal(err)
	}
	src := NewStaticSource(bad)
	if _, err := New(cfg, src, testLogger(t)); err != nil {
		t.Fatal(err)
	}
	if got := metricstest.Value(t, reg, "corpus_dns_records_skipped"); got != 2 {
		t.Errorf("records_skipped = %v, want 2", got)
	}
	src.Set(testZone(t, 2))
	if got := metricstest.Value(t, reg, "corpus_dns_records_skipped"); got != 0 {
		t.Errorf("records_skipped after a clean zone = %v, want 0", got)
	}
}
