package dns

import (
	"sync/atomic"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"corpus/internal/metrics"
)

// metricTypes are the query types counted by name; every other type is
// "other", so odd queries never make new series.
var metricTypes = [...]uint16{
	dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeMX, dns.TypeNS,
	dns.TypeSOA, dns.TypeSRV, dns.TypeTXT, dns.TypePTR, dns.TypeCAA,
	dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeHTTPS, dns.TypeSVCB,
}

// rcodeOther is the index of the response codes counted as "other": those
// above BADCOOKIE and those without a name.
const rcodeOther = dns.RcodeBadCookie + 1

// rcodeNamed says which response codes below rcodeOther have a name.
var rcodeNamed = func() (named [rcodeOther]bool) {
	for r := range named {
		_, named[r] = dns.RcodeToString[r]
	}
	return named
}()

// serverMetrics count what the server answers.
type serverMetrics struct {
	queries     *queryCounter
	rateLimited *prometheus.CounterVec
	dropped     prometheus.Counter
	slipped     prometheus.Counter
}

// newServerMetrics registers the server's metrics in reg; src is the
// source whose zone it serves.
func newServerMetrics(reg prometheus.Registerer, src RecordSource) *serverMetrics {
	m := &serverMetrics{
		queries: &queryCounter{desc: prometheus.NewDesc(
			prometheus.BuildFQName(metrics.Namespace, "dns", "queries_total"),
			"DNS queries answered, by query type (common types by name, else other) and response code.",
			[]string{"type", "rcode"}, nil)},
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "dns", Name: "rate_limited_total",
			Help: "UDP queries over their source's rate limit, by action: dropped, or slipped (an empty truncated answer).",
		}, []string{"action"}),
	}
	skipped := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: "dns", Name: "records_skipped",
		Help: "Records the served zone leaves out because they cannot be served (a CNAME beside other data, a bad name); corpus dns records shows them and why.",
	}, func() float64 {
		z, _ := src.Snapshot()
		if z == nil {
			return 0
		}
		return float64(len(z.skipped))
	})
	reg.MustRegister(m.queries, m.rateLimited, skipped)
	m.dropped = m.rateLimited.WithLabelValues("drop")
	m.slipped = m.rateLimited.WithLabelValues("slip")
	return m
}

// answered counts an answer with rcode to the query r.
func (m *serverMetrics) answered(r *dns.Msg, rcode int) {
	qtype := dns.TypeNone // counted as other
	if len(r.Question) == 1 {
		qtype = r.Question[0].Qtype
	}
	m.queries.add(qtype, rcode)
}

// queryCounter counts answers by query type and response code in atomic
// counters, so that counting costs no label lookup on the query path. It
// is a prometheus.Collector exporting the counters that are not zero.
type queryCounter struct {
	desc *prometheus.Desc
	n    [len(metricTypes) + 1][rcodeOther + 1]atomic.Uint64
}

func (c *queryCounter) add(qtype uint16, rcode int) {
	t := len(metricTypes)
	for i, mt := range metricTypes {
		if mt == qtype {
			t = i
			break
		}
	}
	r := rcodeOther
	if rcode >= 0 && rcode < rcodeOther && rcodeNamed[rcode] {
		r = rcode
	}
	c.n[t][r].Add(1)
}

// Describe implements prometheus.Collector.
func (c *queryCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *queryCounter) Collect(ch chan<- prometheus.Metric) {
	for t := range c.n {
		typ := "other"
		if t < len(metricTypes) {
			typ = dns.TypeToString[metricTypes[t]]
		}
		for r := range c.n[t] {
			v := c.n[t][r].Load()
			if v == 0 {
				continue
			}
			code := "other"
			if r < rcodeOther {
				code = dns.RcodeToString[r]
			}
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v), typ, code)
		}
	}
}
