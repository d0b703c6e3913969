package dns

import (
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// maxCacheTTL caps how long a forwarded answer is kept.
const maxCacheTTL = time.Hour

// cache keeps forwarded answers until their smallest TTL runs out.
type cache struct {
	size int

	mu      sync.Mutex
	entries map[string]cacheEntry
}

type cacheEntry struct {
	msg     *dns.Msg
	stored  time.Time
	expires time.Time
}

// newCache makes a cache of at most size answers. Its map grows with
// use: a resolver that forwards little holds little.
func newCache(size int) *cache {
	return &cache{size: size, entries: map[string]cacheEntry{}}
}

// cacheKey identifies a question and the bits that change its answer.
func cacheKey(r *dns.Msg) string {
	q := r.Question[0]
	var b strings.Builder
	b.WriteString(strings.ToLower(q.Name))
	b.WriteByte('/')
	b.WriteString(dns.TypeToString[q.Qtype])
	b.WriteByte('/')
	b.WriteString(dns.ClassToString[q.Qclass])
	if opt := r.IsEdns0(); opt != nil && opt.Do() {
		b.WriteString("/do")
	}
	if r.CheckingDisabled {
		b.WriteString("/cd")
	}
	return b.String()
}

// get returns a copy of the cached answer with TTLs aged to now, or nil.
func (c *cache) get(key string, now time.Time) *dns.Msg {
	c.mu.Lock()
	e, ok := c.entries[key]
	if ok && !now.Before(e.expires) {
		delete(c.entries, key)
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		return nil
	}
	m := e.msg.Copy()
	age := uint32(now.Sub(e.stored) / time.Second)
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				h.Ttl -= min(age, h.Ttl)
			}
		}
	}
	return m
}

// put stores a copy of m if it is a cacheable answer.
func (c *cache) put(key string, m *dns.Msg, now time.Time) {
	if m.Truncated || (m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError) {
		return
	}
	ttl := maxCacheTTL
	n := 0
	for _, sec := range [][]dns.RR{m.Answer, m.Ns} {
		for _, rr := range sec {
			d := time.Duration(rr.Header().Ttl) * time.Second
			if soa, ok := rr.(*dns.SOA); ok {
				d = min(d, time.Duration(soa.Minttl)*time.Second)
			}
			ttl = min(ttl, d)
			n++
		}
	}
	if n == 0 || ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.size {
		for k, e := range c.entries {
			if !now.Before(e.expires) || len(c.entries) >= c.size {
				delete(c.entries, k)
			}
			if len(c.entries) < c.size/2 {
				break
			}
		}
	}
	c.entries[key] = cacheEntry{msg: m.Copy(), stored: now, expires: now.Add(ttl)}
}
