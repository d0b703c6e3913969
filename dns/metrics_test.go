package dns

import (
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
# HELP corpus_dns_rate_limited_total UDP queries over their source's rate limit, by action: dropped, or slipped (an empty truncated answer).
# TYPE corpus_dns_rate_limited_total counter
corpus_dns_rate_limited_total{action="drop"} 1
corpus_dns_rate_limited_total{action="slip"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
