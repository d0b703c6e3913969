// Package certs gives the node's proxy the TLS material of the https
// domains routed to its guests: the certificates the cluster ordered
// (keys opened by a coordinator, fetched over the agent's mutual TLS,
// kept only in memory), the certificate of a tls-alpn-01 challenge in
// progress, and the answers of http-01 challenges, which the watch
// carries. It also checks, for the orderer, that the proxy answers a
// challenge as the CA will before the CA is asked to validate it.
package certs

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"corpus/netns/proxy"
	corpusv1 "corpus/proto/corpus/v1"
)

// Fetch asks a coordinator for the TLS material of domains.
type Fetch func(ctx context.Context, domains []string) ([]*corpusv1.TlsDomain, error)

// Cache keeps the TLS material of the node's https domains, fetching a
// domain's again when its certificate record changes.
type Cache struct {
	fetch Fetch

	mu   sync.Mutex
	have map[string]*corpusv1.TlsDomain // by domain, at ModifyIndex
	// failedAt is when the last fetch failed: the next waits retryAfter,
	// so that a coordinator out of reach does not hold up every pass.
	failedAt time.Time
}

// retryAfter is the wait after a failed fetch.
const retryAfter = 10 * time.Second

// New returns an empty cache that fetches with fetch.
func New(fetch Fetch) *Cache {
	return &Cache{fetch: fetch, have: map[string]*corpusv1.TlsDomain{}}
}

// Material returns the proxy's TLS table and http-01 answers for the
// certificates the watch gave. A fetch that fails keeps what the cache
// had for those domains (the previous certificate serves on) and the
// error is returned with the rest.
func (c *Cache) Material(ctx context.Context, certs []*corpusv1.Certificate) (map[string]proxy.TLSDomain, map[string]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var stale []string
	want := map[string]bool{}
	challenges := map[string]string{}
	for _, crt := range certs {
		want[crt.Domain] = true
		if ch := crt.Challenge; ch != nil && ch.Type == corpusv1.ChallengeHTTP01 && ch.Token != "" {
			challenges[ch.Token] = ch.KeyAuthorization
		}
		if !needsMaterial(crt) {
			continue
		}
		if h := c.have[crt.Domain]; h == nil || h.ModifyIndex != crt.ModifyIndex {
			stale = append(stale, crt.Domain)
		}
	}
	var err error
	if len(stale) > 0 && time.Since(c.failedAt) < retryAfter {
		err = fmt.Errorf("certificates of %d domains not fetched yet (the last try failed)", len(stale))
	} else if len(stale) > 0 {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var got []*corpusv1.TlsDomain
		got, err = c.fetch(fctx, stale)
		cancel()
		if err != nil {
			c.failedAt = time.Now()
		}
		for _, td := range got {
			if slices.Contains(stale, td.Domain) {
				c.have[td.Domain] = td
			}
		}
	}
	out := map[string]proxy.TLSDomain{}
	for domain, td := range c.have {
		if !want[domain] {
			delete(c.have, domain)
			continue
		}
		out[domain] = proxy.TLSDomain{CertPEM: td.ChainPem, KeyPEM: td.KeyPem, OCSP: td.Ocsp, ALPNCertPEM: td.AlpnCertPem, ALPNKeyPEM: td.AlpnKeyPem}
	}
	if len(challenges) == 0 {
		challenges = nil
	}
	return out, challenges, err
}

// needsMaterial says whether a certificate record has keys to fetch.
func needsMaterial(c *corpusv1.Certificate) bool {
	return c.ChainPem != "" || c.Challenge.GetType() == corpusv1.ChallengeTLSALPN01
}

// Check says whether the proxy at httpAddr (http-01) or httpsAddr
// (tls-alpn-01) answers a challenge as the CA will see it, and if not
// what it answered.
func Check(ctx context.Context, httpAddr, httpsAddr net.Addr, req *corpusv1.CheckChallengeRequest) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	switch req.Type {
	case corpusv1.ChallengeHTTP01:
		if httpAddr == nil {
			return false, "the proxy serves no HTTP"
		}
		body, err := get(ctx, dialable(httpAddr), req.Domain, "/.well-known/acme-challenge/"+req.Token)
		if err != nil {
			return false, err.Error()
		}
		if body != req.Expect {
			return false, fmt.Sprintf("the proxy answers %.80q", body)
		}
		return true, ""
	case corpusv1.ChallengeTLSALPN01:
		if httpsAddr == nil {
			return false, "the proxy serves no HTTPS"
		}
		d := tls.Dialer{Config: &tls.Config{ServerName: req.Domain, NextProtos: []string{"acme-tls/1"}, InsecureSkipVerify: true}}
		conn, err := d.DialContext(ctx, "tcp", dialable(httpsAddr))
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		st := conn.(*tls.Conn).ConnectionState()
		sum := sha256.Sum256(st.PeerCertificates[0].Raw)
		if st.NegotiatedProtocol != "acme-tls/1" || hex.EncodeToString(sum[:]) != req.Expect {
			return false, "the proxy serves another certificate for acme-tls/1"
		}
		return true, ""
	}
	return false, fmt.Sprintf("challenge type %q is not answered here", req.Type)
}

// dialable turns a listen address (maybe unspecified) into one to dial.
func dialable(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func get(ctx context.Context, addr, host, path string) (string, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+path, nil)
	if err != nil {
		return "", err
	}
	res, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 4096))
	if err != nil {
		return "", err
	}
	if res.StatusCode != http.StatusOK {
		return "", errors.New("the proxy answers " + res.Status)
	}
	return string(b), nil
}
