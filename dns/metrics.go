package dns

import (
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"corpus/internal/metrics"
)

// metricTypes are the query types counted by name; every other type is
// "other", so odd queries never make new series.
var metricTypes = map[uint16]bool{
	dns.TypeA: true, dns.TypeAAAA: true, dns.TypeCNAME: true, dns.TypeMX: true, dns.TypeNS: true,
	dns.TypeSOA: true, dns.TypeSRV: true, dns.TypeTXT: true, dns.TypePTR: true, dns.TypeCAA: true,
	dns.TypeANY: true, dns.TypeAXFR: true, dns.TypeIXFR: true, dns.TypeHTTPS: true, dns.TypeSVCB: true,
}

// serverMetrics count what the server answers.
type serverMetrics struct {
	queries     *prometheus.CounterVec
	rateLimited *prometheus.CounterVec
}

func newServerMetrics(reg prometheus.Registerer) *serverMetrics {
	m := &serverMetrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "dns", Name: "queries_total",
			Help: "DNS queries answered, by query type (common types by name, else other) and response code.",
		}, []string{"type", "rcode"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace, Subsystem: "dns", Name: "rate_limited_total",
			Help: "UDP queries over their source's rate limit, by action: dropped, or slipped (an empty truncated answer).",
		}, []string{"action"}),
	}
	reg.MustRegister(m.queries, m.rateLimited)
	for _, a := range []string{"drop", "slip"} {
		m.rateLimited.WithLabelValues(a)
	}
	return m
}

// answered counts an answer with rcode to the query r.
func (m *serverMetrics) answered(r *dns.Msg, rcode int) {
	typ := "other"
	if len(r.Question) == 1 && metricTypes[r.Question[0].Qtype] {
		typ = dns.TypeToString[r.Question[0].Qtype]
	}
	code := "other"
	if s, ok := dns.RcodeToString[rcode]; ok && rcode <= dns.RcodeBadCookie {
		code = s
	}
	m.queries.WithLabelValues(typ, code).Inc()
}
