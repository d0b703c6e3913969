package dns

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// notifier sends NOTIFY (RFC 1996) to the secondaries once on start and
// whenever the source's serial changes, debounced by NotifyDelay. An
// unanswered NOTIFY is resent NotifyRetries times with doubling timeouts; a
// newer serial cancels the retries for the older one.
type notifier struct {
	cfg  Transfer
	tsig map[string]string
	src  RecordSource
	log  *slog.Logger
}

func newNotifier(cfg Transfer, tsig map[string]string, src RecordSource, log *slog.Logger) *notifier {
	return &notifier{cfg: cfg, tsig: tsig, src: src, log: log}
}

func (n *notifier) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var round struct{ cancel context.CancelFunc }
	defer func() {
		if round.cancel != nil {
			round.cancel()
		}
	}()
	var last uint32
	first := true
	for {
		zone, changed := n.src.Snapshot()
		if !first && zone.Serial() == last {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				continue
			}
		}
		// Debounce: wait until the zone is quiet for NotifyDelay.
		timer := time.NewTimer(n.cfg.NotifyDelay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-changed:
			timer.Stop()
			continue
		case <-timer.C:
		}
		first = false
		last = zone.Serial()
		if round.cancel != nil {
			round.cancel()
		}
		roundCtx, cancel := context.WithCancel(ctx)
		round.cancel = cancel
		for _, sec := range n.cfg.Secondaries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n.notify(roundCtx, sec, zone)
			}()
		}
	}
}

// notify sends one NOTIFY for zone to addr, retrying until it is answered.
func (n *notifier) notify(ctx context.Context, addr string, zone *Zone) {
	timeout := n.cfg.NotifyTimeout
	for attempt := 0; attempt <= n.cfg.NotifyRetries; attempt++ {
		m := new(dns.Msg)
		m.SetNotify(zone.Origin())
		m.Answer = []dns.RR{zone.SOA()}
		c := &dns.Client{Net: "udp", Timeout: timeout}
		if n.cfg.NotifyKey != "" {
			c.TsigSecret = n.tsig
			m.SetTsig(dns.CanonicalName(n.cfg.NotifyKey), dns.HmacSHA256, 300, time.Now().Unix())
		}
		resp, _, err := c.ExchangeContext(ctx, m, addr)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			if resp.Rcode != dns.RcodeSuccess {
				n.log.Warn("notify rejected", "secondary", addr, "serial", zone.Serial(), "rcode", dns.RcodeToString[resp.Rcode])
			} else {
				n.log.Debug("notify acknowledged", "secondary", addr, "serial", zone.Serial())
			}
			return
		}
		n.log.Debug("notify unanswered", "secondary", addr, "serial", zone.Serial(), "attempt", attempt+1, "err", err)
		timeout *= 2
	}
	n.log.Warn("notify gave up", "secondary", addr, "serial", zone.Serial(), "attempts", n.cfg.NotifyRetries+1)
}
