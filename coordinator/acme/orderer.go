// Package acme orders and renews the certificates of the cluster's https
// routes from the ACME CA the operator configured (RFC 8555, through
// golang.org/x/crypto/acme).
//
// One orderer runs, on the Raft leader: it is the only writer of
// certificates, so no two nodes ever order the same domain. Every step
// that others must see is a replicated write: the challenge of an order
// in progress (every node's proxy answers http-01 from the state, and
// tls-alpn-01 with the challenge certificate, its key sealed), then the
// certificate with its key sealed by the cluster keyring, as secrets
// are. The CA is told to validate a challenge only once the proxy of the
// domain's node answers it as the CA will (CheckChallenge on the agent).
//
// A certificate is renewed when a third of its life is left. An order
// that fails leaves the certificate the domain had serving, records the
// CA's answer and retries later: after the CA's Retry-After on a rate
// limit, else with a doubling back-off. Certificates are written
// conditionally on the index the orderer read, so a deposed leader's
// late write is refused rather than overwriting its successor's.
package acme

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"golang.org/x/crypto/acme"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/coordinator/state"
	"corpus/internal/clock"
	"corpus/internal/seal"
	corpusv1 "corpus/proto/corpus/v1"
)

// Deps are what the orderer needs from the coordinator.
type Deps struct {
	// Read returns the current state.
	Read func() *state.Snap
	// Propose writes a command through Raft and waits until it applied.
	Propose func(ctx context.Context, cmd *corpusv1.Command) (uint64, error)
	// Keyring returns the cluster keyring, making the first one if none.
	Keyring func(ctx context.Context) (*seal.Keyring, error)
	// Check asks a node's agent whether its proxy answers a challenge.
	Check func(ctx context.Context, node *corpusv1.Node, req *corpusv1.CheckChallengeRequest) (*corpusv1.CheckChallengeResponse, error)
	// Logger receives the orderer's logs (nil: discarded).
	Logger *slog.Logger
	// Now is the clock (nil: clock.System); tests move it.
	Now func() time.Time
	// Every is how often due certificates are looked for (0: 5 s).
	Every time.Duration
}

// Retry back-off of failed orders without a Retry-After.
const (
	retryFirst = time.Minute
	retryMax   = 6 * time.Hour
	// orderTimeout bounds one order, from authorization to certificate.
	orderTimeout = 3 * time.Minute
	// challengeWait bounds the wait for the proxies to answer a challenge.
	challengeWait = 30 * time.Second
)

// RenewAt is when a certificate valid from nb to na is renewed: a third
// of its life before it ends.
func RenewAt(nb, na time.Time) time.Time {
	return na.Add(-na.Sub(nb) / 3)
}

// Backoff is the wait after the n-th failed order in a row (n ≥ 1).
func Backoff(n int32) time.Duration {
	d := retryFirst
	for i := int32(1); i < n && d < retryMax; i++ {
		d *= 2
	}
	return min(d, retryMax)
}

// Run orders and renews certificates until ctx ends; the leader runs it.
func Run(ctx context.Context, d Deps) {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = clock.System.Now
	}
	if d.Every == 0 {
		d.Every = 5 * time.Second
	}
	o := &orderer{Deps: d}
	t := time.NewTicker(d.Every)
	defer t.Stop()
	for {
		o.pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

type orderer struct {
	Deps
	client *client // for the account configured at acmeIndex
	index  uint64
}

// due are the https domains whose certificate should be ordered now:
// none yet, a renewal due, a retry due, or an OCSP response to refresh.
func due(view *state.Snap, now time.Time) []string {
	var out []string
	for _, domain := range view.HTTPSDomains() {
		if node := domainNode(view, domain); node == nil {
			continue // its guest is not placed: nobody could answer
		}
		c := view.Certificate(domain)
		if c == nil || c.NextAttemptAt == nil || !now.Before(c.NextAttemptAt.AsTime()) {
			out = append(out, domain)
		}
	}
	return out
}

// domainNode is the node whose proxy serves domain, or nil.
func domainNode(view *state.Snap, domain string) *corpusv1.Node {
	r := view.RouteByDomain(domain)
	if r == nil {
		return nil
	}
	g := view.Guest(r.GuestId)
	if g == nil || g.NodeId == "" {
		return nil
	}
	return view.Node(g.NodeId)
}

// pass orders every due certificate, one at a time, and forgets those
// no route asks for any more that could not serve anyway.
func (o *orderer) pass(ctx context.Context) {
	view := o.Read()
	o.forget(ctx, view)
	cfg := view.Acme()
	if cfg == nil {
		return
	}
	domains := due(view, o.Now())
	if len(domains) == 0 {
		o.staple(ctx, view)
		return
	}
	c, err := o.account(ctx)
	if err != nil {
		o.Logger.Warn("acme account", "error", err)
		for _, domain := range domains {
			o.failed(ctx, domain, err)
		}
		return
	}
	for _, domain := range domains {
		if ctx.Err() != nil {
			return
		}
		octx, cancel := context.WithTimeout(ctx, orderTimeout)
		err := o.order(octx, c, domain)
		cancel()
		if err != nil && ctx.Err() == nil {
			o.Logger.Warn("certificate order failed", "domain", domain, "error", err)
			o.failed(ctx, domain, err)
		}
	}
}

// forget deletes the certificates of domains no https route asks for
// that serve nothing: pending or failed without a certificate, or
// expired. A valid one stays until it expires, so a domain routed again
// meanwhile needs no new order.
func (o *orderer) forget(ctx context.Context, view *state.Snap) {
	want := map[string]bool{}
	for _, d := range view.HTTPSDomains() {
		want[d] = true
	}
	now := o.Now()
	for _, c := range view.Certificates() {
		if want[c.Domain] {
			continue
		}
		if c.ChainPem != "" && c.NotAfter != nil && now.Before(c.NotAfter.AsTime()) && c.Challenge == nil {
			continue
		}
		if _, err := o.Propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_DeleteCertificate{DeleteCertificate: &corpusv1.DeleteCertificate{Domain: c.Domain}}}); err != nil {
			o.Logger.Warn("forgetting a certificate", "domain", c.Domain, "error", err)
		}
	}
}

// put writes a certificate conditionally on the one read before.
func (o *orderer) put(ctx context.Context, crt *corpusv1.Certificate, expect uint64) (uint64, error) {
	return o.Propose(ctx, &corpusv1.Command{Cmd: &corpusv1.Command_PutCertificate{PutCertificate: &corpusv1.PutCertificate{Certificate: crt, ExpectModifyIndex: expect}}})
}

// failed records a failed order: the certificate the domain has stays,
// the CA's answer is kept and the next attempt backs off.
func (o *orderer) failed(ctx context.Context, domain string, cause error) {
	err := o.update(ctx, domain, func(crt *corpusv1.Certificate) bool {
		crt.Challenge = nil
		crt.State = state.CertFailed
		crt.Failures++
		crt.LastError = describe(cause)
		crt.LastAttemptAt = timestamppb.New(o.Now())
		wait := Backoff(crt.Failures)
		if after, ok := acme.RateLimit(cause); ok && after > 0 { // the CA's Retry-After
			wait = after
		}
		crt.NextAttemptAt = timestamppb.New(o.Now().Add(wait))
		return true
	})
	if err != nil {
		o.Logger.Warn("recording a failed order", "domain", domain, "error", err)
	}
}

// update changes a domain's certificate record (a new pending one when
// it has none) with change, written conditionally on the record read:
// when another write came between, it reads and changes again. change
// returning false writes nothing.
func (o *orderer) update(ctx context.Context, domain string, change func(*corpusv1.Certificate) bool) error {
	for range 3 {
		cur := o.Read().Certificate(domain)
		crt := &corpusv1.Certificate{Domain: domain, State: state.CertPending}
		var expect uint64
		if cur != nil {
			crt, expect = cloneCert(cur), cur.ModifyIndex
		}
		if !change(crt) {
			return nil
		}
		if _, err := o.put(ctx, crt, expect); err == nil || !errors.Is(err, state.ErrStale) {
			return err
		}
	}
	return errors.New("the certificate record kept changing")
}
