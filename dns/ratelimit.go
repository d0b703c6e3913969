package dns

import (
	"net/netip"
	"sync"
	"time"
)

type verdict int

const (
	verdictAllow verdict = iota
	verdictDrop
	verdictSlip
)

// limiter is a token bucket per source address.
type limiter struct {
	cfg RateLimit

	mu      sync.Mutex
	buckets map[netip.Addr]*bucket
}

type bucket struct {
	tokens  float64
	last    time.Time
	dropped int
}

func newLimiter(cfg RateLimit) *limiter {
	return &limiter{cfg: cfg, buckets: map[netip.Addr]*bucket{}}
}

// take spends one token of addr's bucket at now.
func (l *limiter) take(addr netip.Addr, now time.Time) verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[addr]
	if b == nil {
		if len(l.buckets) >= l.cfg.MaxSources {
			l.prune(now)
		}
		b = &bucket{tokens: float64(l.cfg.Burst), last: now}
		l.buckets[addr] = b
	}
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(float64(l.cfg.Burst), b.tokens+d.Seconds()*l.cfg.PerSecond)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return verdictAllow
	}
	b.dropped++
	if l.cfg.Slip > 0 && b.dropped%l.cfg.Slip == 0 {
		return verdictSlip
	}
	return verdictDrop
}

// prune forgets buckets that have refilled; if that frees nothing it
// forgets them all, which only lets a flood through for one burst.
func (l *limiter) prune(now time.Time) {
	for a, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.cfg.PerSecond >= float64(l.cfg.Burst) {
			delete(l.buckets, a)
		}
	}
	if len(l.buckets) >= l.cfg.MaxSources {
		clear(l.buckets)
	}
}
